"""kohort's admission webhook: gang fields and the admission hold on new workloads, and the
checks that keep users from releasing a gang their queue has not admitted.

Rule: the decision (`mutation`, `validation`) is a pure function from an AdmissionReview dict
to a response dict; it never calls the API server. `server` only decodes, calls it and encodes.
"""

"""One adapter per workload kind (Job, StatefulSet, LeaderWorkerSet, JobSet, PyTorchJob,
RayCluster, RayJob, Pod) behind one interface.

Rule: adapters are pure functions over plain dicts (the objects as the API server sends them);
they never await and never talk to the API server. The webhook uses them to default and check
objects at admission, the controller to find a workload's gangs and to hold, release or evict it.
Adding a kind is one new module plus one line in `registry.REGISTRY`; what other code needs to
know about kinds is derived there from what each adapter declares (`capabilities`).
"""

"""I/O adapters of the quota controller: typed API access, informers, writers, leader election.

Rule: this is the only package of kohort that talks to the API server (and `kubeconfig` is the
only module in it that imports kubernetes-asyncio, for exec plugins and auth providers).
Everything here turns objects into the plain data the decision core reads, or decisions into API
writes; no admission policy lives here.
"""

"""The controller's picture of the cluster: gangs found from objects, the engine they feed, and
the writes they need, all pure and synchronous.

Rule: nothing in this package performs I/O, awaits or reads the clock; the informers call
`ClusterState.observe`, the reconciler calls `sync` and `decide` and carries out the steps.
"""

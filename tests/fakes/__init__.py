"""What unit tests and benches put in place of a cluster and its users: an API server in memory
(`memory_api`), workload manifests (`workloads`) and admission reviews (`reviews`).

Test support only, outside the installed packages: no module of the product imports it.
"""

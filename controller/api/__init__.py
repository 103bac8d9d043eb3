"""The API: kohort.dev/v1alpha1's pydantic models (`queues`, `workload`, their CRDs in `crds`),
the msgspec views of the Kubernetes objects kohort reads (`kube`), kinds, names, conditions,
quantities and timestamps, each in its own module.

Rule: this package imports nothing else of kohort; everything else may import it. It
re-exports nothing, so that importing one module (the decision core imports `quantity` and
`times`) loads neither pydantic nor msgspec.
"""

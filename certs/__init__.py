"""Certificates for the webhook: a small CA, `kohort certs generate`, the in-cluster rotator
and hot reload of the serving certificate.

Rule: nothing here imports the rest of kohort; the rotator is the only module that talks to
the API server, and it treats the Secret as the source of truth.
"""

"""A helm post-renderer: the chart's Deployments' pods on their node's network namespace.

    helm install ... --post-renderer PATH    (PATH runs `python -m hack.host_network`)

For the real node of hack/realnode.py, whose only pod network is loopback: the pods listen on
127.0.0.1, where the API server reaches the webhook (the chart's URL mode) and the kubelet
probes them. The chart has no value for it: a real cluster's pods have a network.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml


def on_host_network(doc: Any) -> Any:
    if isinstance(doc, dict) and doc.get("kind") == "Deployment":
        pod = doc["spec"]["template"]["spec"]
        pod["hostNetwork"] = True
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"
    return doc


def main() -> None:
    docs = [on_host_network(doc) for doc in yaml.safe_load_all(sys.stdin) if doc]
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Installs what `make image` and tests/cluster/test_image.py use, from Debian's packages:
# mmdebstrap and umoci build the image, podman with runc runs it, skopeo copies it into podman's
# storage; containerd (1.6 in bookworm) runs it on the real node of hack/realnode.py. Does nothing
# when all are there. Needs root (apt-get); without it the image and real-node tests skip.
set -euo pipefail

tools=(mmdebstrap umoci podman runc skopeo containerd)
missing=()
for tool in "${tools[@]}"; do command -v "$tool" >/dev/null || missing+=("$tool"); done
((${#missing[@]})) || exit 0
if [[ $(id -u) -ne 0 ]]; then
  echo "install-image-tools: ${missing[*]} missing; as root: apt-get install -y ${tools[*]}" >&2
  exit 0  # the image tests skip, saying so
fi
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${tools[@]}" >/dev/null; }; then
  echo "install-image-tools: apt-get could not install ${tools[*]}; the image tests will skip, saying so" >&2
fi

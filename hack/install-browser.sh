#!/usr/bin/env bash
# Installs Debian's Chromium and its WebDriver, which the dashboard's browser tests drive
# (tests/cluster/test_dashboard.py); does nothing when both are there. Needs root (apt-get).
set -euo pipefail

if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-browser: chromium and chromium-driver are missing; as root: apt-get install -y chromium chromium-driver" >&2
  exit 0  # the browser tests skip, saying so
fi
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }; then
  echo "install-browser: apt-get could not install chromium and chromium-driver; the browser tests will skip, saying so" >&2
fi

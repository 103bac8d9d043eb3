#!/usr/bin/env bash
# Runs pytest from the project's venv; exit code 5 (no test selected) is not a failure.
set -u
cd "$(dirname "$0")/.."
.venv/bin/pytest "$@"
rc=$?
if [[ $rc -eq 5 ]]; then
  echo "pytest: no test matched this selection"
  exit 0
fi
exit $rc

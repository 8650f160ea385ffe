#!/usr/bin/env bash
# The wheelhouse the Dockerfile installs from: tableservice and every dependency of its spark and service extras.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
rm -rf wheelhouse
"$PY" -m pip wheel --quiet --wheel-dir wheelhouse ".[spark,service]"

#!/usr/bin/env bash
# Prefect server + UI on http://127.0.0.1:4200, the cpu/gpu work pools, every deployment of
# prefect.yaml applied, and a worker on the cpu pool. Ctrl-C stops the worker, then the server.
# Options: --port N, --gpu-worker (GPU hosts), --no-worker (see flows/local_stack.py).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python flows/local_stack.py prefect "$@"

#!/usr/bin/env bash
# Prefect server + UI on http://127.0.0.1:4200, the cpu/gpu work pools, every deployment of
# prefect.yaml applied, and a worker on the cpu pool. Ctrl-C stops the worker, then the server.
# Options: --port N, --no-worker (see flows/local_stack.py), and on GPU hosts (docs/gpu.md):
#   --gpu-worker          one gpu-pool worker for all visible GPUs, --limit 1 (a run trains on all of them)
#   --gpu-worker-per-gpu  one gpu-pool worker per visible GPU (CUDA_VISIBLE_DEVICES=k), --limit 1 each
# Visible GPUs: CUDA_VISIBLE_DEVICES when set (e.g. CUDA_VISIBLE_DEVICES=2,3 scripts/prefect_up.sh ...), else nvidia-smi's.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python flows/local_stack.py prefect "$@"

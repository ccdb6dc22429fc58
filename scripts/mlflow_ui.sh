#!/usr/bin/env bash
# MLflow UI on http://127.0.0.1:5000 over the project's store (register.tracking_uri, default
# sqlite:///mlflow.db in the project root). Usage: scripts/mlflow_ui.sh [PORT]
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${1:-5000}"
STORE="$(.venv/bin/python -c 'from xdistill.io import load_params; from xdistill.registry.store import resolve_tracking_uri; print(resolve_tracking_uri(load_params("register").get("tracking_uri")))')"
export MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true
# Without it, stopping the server leaves orphan job-runner processes (stack-notes.md).
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false
echo "MLflow UI: http://127.0.0.1:${PORT}  (store ${STORE})"
exec .venv/bin/mlflow server --backend-store-uri "$STORE" --registry-store-uri "$STORE" \
    --host 127.0.0.1 --port "$PORT" --workers 1

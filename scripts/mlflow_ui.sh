#!/usr/bin/env bash
# MLflow UI on http://127.0.0.1:5000 over the project's store (register.tracking_uri, default
# sqlite:///mlflow.db in the project root). Ctrl-C stops it. Usage: scripts/mlflow_ui.sh [PORT]
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python flows/local_stack.py mlflow --port "${1:-5000}"

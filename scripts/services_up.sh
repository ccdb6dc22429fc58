#!/usr/bin/env bash
# The services that hosts share in place of a disk (docs/multi-host.md): Prefect server + UI, an MLflow tracking
# server storing models itself, a WebDAV DVC remote and a git remote, all on one address. Ctrl-C stops them.
#   scripts/services_up.sh --host 10.0.0.5      # the address every host reaches (default 127.0.0.1)
# Options: --dir (state, default .services), --prefect-port 4200, --mlflow-port 5000, --webdav-port 8080,
# --git-port 9418, --repo-name xdistill, --seed PATH (checkout that fills a new git remote; default this one),
# --ssh-port PORT (beyond 127.0.0.1: the SSH port in the git remote's URL; default ssh's, 22).
# Every service asks for credentials (MLflow basic-auth, Prefect's API auth string, a WebDAV account), kept in
# <dir>/secrets.env (mode 600; made on the first start from MLFLOW_TRACKING_USERNAME/PASSWORD,
# PREFECT_API_AUTH_STRING, XDISTILL_DVC_USER/PASSWORD where set, else generated). Beyond 127.0.0.1 the git
# remote is the bare repository over SSH (git daemon serves loopback only); --no-auth works on 127.0.0.1 only.
# It writes <dir>/multi-host.env (mode 600, with the credentials): source it on every host (workers,
# promoters, the services host).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python flows/services.py up "$@"

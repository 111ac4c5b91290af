#!/usr/bin/env bash
# The whole test suite (real Milvus Lite, SQLite, the packaged model, Prefect) plus lint.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PREFECT_SERVER_ANALYTICS_ENABLED=false HF_HUB_OFFLINE=1
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"

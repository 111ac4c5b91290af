#!/usr/bin/env bash
# The main job on the embedded defaults: index seed-docs/ into Milvus Lite + SQLite under
# ./.kbflow with the packaged model, then show what was indexed. Rerun it: the second run is free.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PREFECT_SERVER_ANALYTICS_ENABLED=false HF_HUB_OFFLINE=1
.venv/bin/kbflow reindex seed-docs "$@"
.venv/bin/kbflow status

#!/usr/bin/env bash
# The docs site: `bash scripts/docs.sh serve` (http://127.0.0.1:8000) or `bash scripts/docs.sh build
# --strict`. MkDocs from ./.venv, without Material's end-of-life banner (jieba's dictionary notes
# are kept off by the docs hook, scripts/docs_reference.py).
set -euo pipefail
cd "$(dirname "$0")/.."
export NO_MKDOCS_2_WARNING=1 PREFECT_SERVER_ANALYTICS_ENABLED=false HF_HUB_OFFLINE=1
exec .venv/bin/mkdocs "$@"

#!/usr/bin/env bash
# Headless Chromium for the report's browser test (tests/test_report_html.py), from Debian's
# packages; idempotent. Without it that test is skipped with a reason; CI always installs it.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
chromium --version 2>/dev/null || true

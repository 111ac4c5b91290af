#!/usr/bin/env bash
# Prometheus and promtool for the operations tests (tests/test_operations.py), from Debian's
# packages; idempotent. Without them those tests are skipped with a reason; CI always installs them.
set -euo pipefail
if ! command -v promtool >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
# the package's service is not wanted: the tests start their own Prometheus on loopback
(systemctl disable --now prometheus >/dev/null 2>&1 || service prometheus stop >/dev/null 2>&1) || true
promtool --version 2>/dev/null | head -1 || true

#!/usr/bin/env bash
# Headless Chromium for the report's browser test (tests/test_report_html.py), and a CJK font
# for its Chinese text, from Debian's packages; idempotent. Without Chromium that test is skipped
# with a reason; CI always installs both.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# a font with Chinese glyphs: without one, the report's Chinese questions render as boxes
if ! fc-list :lang=zh family 2>/dev/null | grep -q .; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-wqy-microhei >/dev/null
fi
chromium --version 2>/dev/null || true

#!/usr/bin/env bash
# Headless Chromium for tests/test_report_chromium.py (the HTML report must render offline in a real
# browser). Debian's `chromium` package; --no-install-recommends keeps out fonts/extras we do not
# need (the test only checks that charts draw and that nothing is fetched). Idempotent; needs root.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
chromium --version 2>/dev/null || true

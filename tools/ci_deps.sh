#!/usr/bin/env bash
# System packages the test suite needs beyond Python: Debian's chromium, which tests/test_browser.py drives
# through Playwright (Playwright's own browser downloads are not used). Idempotent and quiet.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null

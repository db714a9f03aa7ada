#!/usr/bin/env bash
# Chromium and ChromeDriver from Debian's packages, for the browser test of report.html
# (tests/integration/test_report_html_browser.py). Skipped when both already run; installing
# needs root (apt-get), as on CI. fonts-dejavu-core: the page's text and the plots' labels.
set -euo pipefail
works() { /usr/bin/chromium --version >/dev/null 2>&1 && /usr/bin/chromedriver --version >/dev/null 2>&1; }
if works; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "setup_browser: Chromium is missing and installing it needs root:" \
    "sudo apt-get install -y chromium chromium-driver (the browser test of report.html fails without it)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
works || { echo "setup_browser: chromium or chromedriver still does not run" >&2; exit 1; }

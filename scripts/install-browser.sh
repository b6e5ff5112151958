#!/usr/bin/env bash
# Installs Debian's Chromium for the browser tests (the /docs page), unless it is already there.
# playwright-core drives it at /usr/bin/chromium; no tool downloads a browser of its own.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium

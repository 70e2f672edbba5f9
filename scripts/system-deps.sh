#!/usr/bin/env bash
# System packages the tests need: Debian's chromium and chromium-driver (GUI agents run MiniWoB++ in them).
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  echo "[system] chromium $(chromium --version 2>/dev/null | awk '{print $2}') already installed"
  exit 0
fi
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
echo "[system] apt-get install chromium chromium-driver"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null

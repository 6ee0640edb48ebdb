#!/usr/bin/env bash
# Installs everything xlserve needs to build, run and test on Debian 12 (bookworm).
# Run as root (or with sudo). Safe to run again.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PACKAGES=(
  # build
  build-essential cmake pkg-config git
  # libraries (design card)
  libmicrohttpd-dev libjansson-dev libopenblas-dev libuv1-dev libsqlite3-dev
  # tests, reference implementation, trainer and converter
  python3 python3-numpy python3-torch python3-pytest
  # fuzzing (libFuzzer)
  clang libclang-rt-14-dev
  # deployment tests: nginx in front, systemd-analyze verify
  nginx-light systemd curl
)
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"

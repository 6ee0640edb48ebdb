#!/usr/bin/env bash
# Installs what xlserve needs on Debian 12 (bookworm). Run as root, or as a user with sudo (the
# script calls sudo itself). Safe to run again.
#   tools/install-deps.sh build      what building and running from the build tree need (the
#                                    quick start's first command; the Docker image's build stage)
#   tools/install-deps.sh test       build's, plus what the test suite needs (tools/test.sh; CI)
#   tools/install-deps.sh runtime    only what running the installed daemon needs (its final stage)
#   tools/install-deps.sh            the same as test (all is another name for it)
#   tools/install-deps.sh --print SET   prints the packages of SET, installs nothing
# On a bare Debian 12 (about 90 packages), build adds about 110 packages (130 MB of downloads);
# test about 525 (580 MB of downloads: torch, chromium, clang, valgrind, nginx, ...).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
BUILD=(
  build-essential cmake pkg-config git
  # libraries (design card)
  libmicrohttpd-dev libjansson-dev libopenblas-dev libuv1-dev libsqlite3-dev
  libhiredis-dev
)
RUNTIME=(
  # the shared libraries the binary links (tests/deploy checks the list against it)
  libmicrohttpd12 libjansson4 libopenblas0-pthread libuv1 libsqlite3-0 libhiredis0.14
  # the container's HEALTHCHECK
  curl
)
TEST=(
  # tests, reference implementation, trainer and converter
  python3 python3-numpy python3-torch python3-pytest python3-pytest-xdist
  # fuzzing (libFuzzer) and the clang build; llvm-symbolizer: sanitizer reports name
  # functions and lines instead of bare addresses
  clang libclang-rt-14-dev llvm
  # the C style check (.clang-format; ctest format.clang_format, in the clang stage)
  clang-format
  # memcheck of the daemon (tests/integration/test_valgrind.py)
  valgrind
  # deployment tests: nginx in front, systemd-analyze verify, the unit's syscall filter
  nginx-light systemd curl strace
  # several replicas sharing a Redis session store (tests/deploy/test_replicas.py)
  redis-server
  # the web page's browser tests (tests/web: headless, driven over the DevTools pipe)
  chromium
)
# the real npm clients (tests/integration/test_npm_clients.py): Debian's Node.js and npm, unless a
# node is already installed (a newer one from elsewhere is kept, not replaced)
if ! command -v node >/dev/null 2>&1; then TEST+=(nodejs npm); fi
print=0
if [ "${1:-}" = --print ]; then print=1; shift; fi
case "${1:-test}" in
  test | all) PACKAGES=("${BUILD[@]}" "${TEST[@]}") ;;
  build) PACKAGES=("${BUILD[@]}") ;;
  runtime) PACKAGES=("${RUNTIME[@]}") ;;
  *) echo "usage: $0 [--print] [build|test|runtime]" >&2; exit 2 ;;
esac
if [ "$print" = 1 ]; then printf '%s\n' "${PACKAGES[@]}"; exit 0; fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"

#!/usr/bin/env bash
# The arm64 (aarch64) check, run on a Debian 12 amd64 machine: cross-builds xlserve's core and
# CLI (-DXL_WITH_SERVER=OFF) with Debian's cross compiler and the arm64 multiarch libraries
# (cmake/toolchain-aarch64.cmake), then runs under qemu-user:
#   1. deps    installs what is missing (arm64 architecture, gcc-aarch64-linux-gnu, qemu-user-static,
#              libopenblas-dev:arm64, libjansson-dev:arm64); nothing to do when all are there
#   2. build   configure + build into build-arm64/
#   3. unit    the core unit tests (ctest -R unit.: every unit.* test the build defines, e.g.
#              one per kernel family), each binary run through qemu-aarch64
#   4. parity  tests/parity (pytest, numpy reference; random models of every configuration and
#              the bundled model; ctest pytest.parity, on the automatic choice NEON, and
#              pytest.parity.portable; pytest.parity.neon would repeat the first) with
#              XLSERVE_BIN = build-arm64/xlserve-emulated (the qemu wrapper); the unit and parity
#              tests run one per core at once
#   5. bpb     only when XL_NATIVE_BIN names a native xlserve: `xlserve eval` of the bundled model
#              on 1 KiB of its model card, arm64 under qemu and native; the printed nll/token and
#              bits/byte must be identical
# Takes about 3 minutes on 2 busy x86 cores with the packages present (build ~40 s, unit ~10 s,
# parity ~80 s, bpb ~55 s); each per-kernel-family variant of the tests adds ~15 s (unit) and
# ~90 s (parity); the first run adds the packages (~1-2 min, ~150 MB download). Every step
# runs under `timeout` (seconds: XL_ARM64_TIMEOUT_DEPS=1200 BUILD=900 UNIT=600 PARITY=1500
# BPB=600), so a hang under emulation ends as a failure.
# Usage: tools/test-arm64.sh            (as root, or a user with sudo; XL_ARM64_SKIP_DEPS=1 skips
#                                        step 1, XL_ARM64_BUILD_DIR changes the build directory)
# Exit status 0 when every step passed; the last line is the summary either way:
#   === arm64: PASS (deps 0s, build 52s, unit 9s, parity 118s, bpb skipped) in 179s
# Exit 77, with the reason as the last line, when this machine cannot run it: not Debian on
# amd64, or the cross toolchain / qemu-user missing and not installable (no root or sudo, or
# apt-get failed). tools/test.sh then lists the stage as skipped (failed under
# XL_REQUIRE_ARM64=1, as in CI).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export SRC=$PWD
export BUILD=${XL_ARM64_BUILD_DIR:-$SRC/build-arm64}
JOBS=$(nproc 2>/dev/null || echo 2)
export JOBS
export SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

START=$SECONDS
TIMES=() # "step 12s" per step, for the summary line
summary() { # PASS|FAIL
  local joined
  joined=$(printf '%s, ' "${TIMES[@]}")
  echo "=== arm64: $1 (${joined%, }) in $((SECONDS - START))s"
}
step() { # name, timeout_s, command...: the command under timeout; on failure: summary, exit 1
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  echo "=== arm64: $name (limit ${limit}s)"
  timeout --kill-after=30 "$limit" "$@"
  rc=$?
  if [ "$rc" -ne 0 ]; then
    local why="exit status $rc"
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then why="timed out after ${limit}s"; fi
    echo "arm64: step $name failed: $why" >&2
    TIMES+=("$name FAILED after $((SECONDS - t0))s")
    summary FAIL
    exit 1
  fi
  TIMES+=("$name $((SECONDS - t0))s")
}

# The steps below are functions run by `timeout` through bash -c (exported with export -f).
packages() {
  echo gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static \
    libopenblas-dev:arm64 libjansson-dev:arm64
}
missing_packages() {
  local p
  for p in $(packages); do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -qx 'install ok installed' || echo "$p"
  done
}
install_deps() {
  local missing
  missing=$(missing_packages)
  if [ -z "$missing" ]; then echo "all present: $(packages)"; return 0; fi
  echo "installing:" "${missing//$'\n'/ }"
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64 || return 1
  fi
  # the arm64 package lists come from the same Debian mirror as the amd64 ones
  $SUDO apt-get update -q -o DPkg::Lock::Timeout=900 || return 1
  # shellcheck disable=SC2086 # one package per word
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    -o DPkg::Lock::Timeout=900 $missing || return 1
  missing=$(missing_packages)
  [ -z "$missing" ] || { echo "still missing after apt-get install:" "${missing//$'\n'/ }" >&2; return 1; }
}
is_aarch64_elf() { # the ELF header's e_machine (bytes 18-19, little endian) is 183: EM_AARCH64
  [ "$(od -An -tu2 -j18 -N2 "$1" | tr -d ' ')" = 183 ] ||
    { echo "$1 is not an aarch64 binary" >&2; return 1; }
}
build() {
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_TOOLCHAIN_FILE="$SRC/cmake/toolchain-aarch64.cmake" \
    -DXL_WITH_SERVER=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
    cmake --build "$BUILD" -j "$JOBS" && is_aarch64_elf "$BUILD/xlserve"
}
bpb() { # the eval summary line of the arm64 (under qemu) and of the native binary
  local text="$BUILD/bpb-text.txt" a n
  head -c 1024 "$SRC/models/austen-byte/MODEL_CARD.md" >"$text" || return 1
  a=$("$BUILD/xlserve-emulated" eval --text "$text" --threads 1 | grep 'bits/byte') || return 1
  n=$("$XL_NATIVE_BIN" eval --text "$text" --threads 1 | grep 'bits/byte') || return 1
  echo "arm64:  $a"
  echo "native: $n"
  # nll/token and bits/byte equal to the printed digits (tokens/s differs)
  [ "${a% tokens/s*}" = "${n% tokens/s*}" ] || { echo "arm64 and native differ" >&2; return 1; }
}
export -f packages missing_packages install_deps is_aarch64_elf build bpb

cannot_run() { # WHY: this machine cannot run the stage: exit 77, WHY the last line
  echo "=== arm64: cannot run here"
  echo "$*"
  exit 77
}
if [ "${XL_ARM64_SKIP_DEPS:-0}" = 1 ]; then TIMES+=("deps skipped"); else
  arch=$(dpkg --print-architecture 2>/dev/null) ||
    cannot_run "no dpkg: the arm64 stage needs Debian (amd64) to install its cross toolchain"
  [ "$arch" = amd64 ] || cannot_run "this machine is $arch; the arm64 stage runs on amd64"
  missing=$(missing_packages)
  if [ -n "$missing" ] && [ -n "$SUDO" ] && ! sudo -n true 2>/dev/null; then
    cannot_run "missing ${missing//$'\n'/ }, and neither root nor sudo to install them"
  fi
  echo "=== arm64: deps (limit ${XL_ARM64_TIMEOUT_DEPS:-1200}s)"
  t0=$SECONDS
  timeout --kill-after=30 "${XL_ARM64_TIMEOUT_DEPS:-1200}" bash -c install_deps ||
    cannot_run "missing ${missing//$'\n'/ }, and installing them failed (exit $?)"
  TIMES+=("deps $((SECONDS - t0))s")
fi
step build "${XL_ARM64_TIMEOUT_BUILD:-900}" bash -c build
step unit "${XL_ARM64_TIMEOUT_UNIT:-600}" \
  ctest --test-dir "$BUILD" -R '^unit\.' --output-on-failure --no-tests=error -j "$JOBS"
step parity "${XL_ARM64_TIMEOUT_PARITY:-1500}" \
  ctest --test-dir "$BUILD" -R '^pytest\.parity($|\.portable$)' --output-on-failure --no-tests=error -j "$JOBS"
[ -f "$BUILD/parity_results.txt" ] && grep -E '^(overall|bundled)' "$BUILD/parity_results.txt"
if [ -n "${XL_NATIVE_BIN:-}" ]; then
  export XL_NATIVE_BIN
  step bpb "${XL_ARM64_TIMEOUT_BPB:-600}" bash -c bpb
else
  TIMES+=("bpb skipped (no XL_NATIVE_BIN)")
fi
summary PASS

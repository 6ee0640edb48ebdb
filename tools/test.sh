#!/usr/bin/env bash
# The test suite, in stages. Each stage configures its own build directory with warnings as
# errors (-DXL_WERROR=ON), builds what its tests need, and runs them under ctest:
#
#   stage         build dir          configuration                         tests
#   gcc           build/             RelWithDebInfo, gcc                   every suite
#   loaded        build/ (gcc's)     RelWithDebInfo, gcc                   C unit tests (once each),
#                                                                          the daemon over HTTP
#                                                                          (integration), beside one
#                                                                          spinning thread per core
#   asan          build-asan/        Debug, gcc, ASan + UBSan              every suite but the quality
#                                                                          bounds (numbers: gcc stage)
#   tsan          build-tsan/        RelWithDebInfo, gcc, ThreadSanitizer  C unit tests, the daemon
#                                                                          over HTTP (integration)
#   gcc-release   build-gcc-release/ Release (-O3), gcc                    C unit tests
#   gcc-debug     build-gcc-debug/   Debug, gcc                            C unit tests
#   clang         build-clang/       RelWithDebInfo, clang                 C unit tests, the include rule (layers),
#                                                                          the C style (format)
#   fuzz          build-fuzz/        clang, libFuzzer + ASan/UBSan         each fuzzer for
#                                                                          XL_FUZZ_SECONDS (60)
#   then the scripts in EXTRA_STAGES below (and in $XL_EXTRA_STAGES), one stage each.
#
# Usage: tools/test.sh [STAGE...] [CTEST ARGS...]     no STAGE: every stage (what CI runs)
#   RUN=REGEX tools/test.sh gcc     only the tests whose ctest name matches REGEX, building only
#                                   what they need; a stage where none matches is skipped.
#                                   e.g. RUN=unit.test_core_state, RUN=pytest.parity
#   XL_TEST_RUN=NAME                in the C unit tests, only the test functions NAME selects
#                                   (comma-separated names or patterns; see tests/unit/testlib.h)
#   PYTEST_ADDOPTS='-k sigterm'     passed to every pytest suite by pytest itself
#   XL_SKIP_FUZZ=1                  skips the fuzz stage; XL_FUZZ_SECONDS=N: each fuzzer's time
#   REPEAT=N tools/test.sh STAGE    each selected test runs up to N times, stopping at its first
#                                   failure (ctest --repeat until-fail:N): a flaky test shows up.
#                                   e.g. REPEAT=50 RUN=unit.test_server_store XL_TEST_RUN=test_a_*
#                                   tools/test.sh loaded   (50 runs of those functions under load)
#   XL_LOAD_SECONDS=N               the loaded stage's spinning threads stop after N s at most
#                                   (default 2400; they are stopped with the stage anyway)
#   XL_REQUIRE_DOCKER=1, XL_REQUIRE_ARM64=1, XL_REQUIRE_STAGES='NAME...'
#                                   a stage that cannot run here (exit 77: test-docker without a
#                                   Docker engine that can start, test-arm64 without its cross
#                                   toolchain and qemu-user) fails instead of being skipped (CI)
# The last line names the stages that ran, and those skipped and why ("NAME skipped: REASON").
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=$(nproc 2>/dev/null || echo 2)

# Optional stages: scripts run after the built-in stages, each as a stage named after the script
# (without .sh). A script exits 0 when it passed, 77 when it cannot run on this machine (its last
# line says why, e.g. no container engine), anything else when it failed. It runs from the
# repository root. A stage that is required (XL_REQUIRE_STAGES, or its own variable below) and
# exits 77 fails the run.
# arm64: the core and CLI cross-built for aarch64, unit tests and parity under qemu-user.
# docker: the image built and run on a real engine (health, streams, restart, stop, compose).
EXTRA_STAGES=(tools/test-arm64.sh tools/test-docker.sh)
# shellcheck disable=SC2206 # a space-separated list of paths
EXTRA_STAGES+=(${XL_EXTRA_STAGES:-})

BUILTIN_STAGES=(gcc loaded asan tsan gcc-release gcc-debug clang fuzz)
extra_name() { local n; n=$(basename "$1"); echo "${n%.sh}"; }
# required_by NAME: the setting that makes a skip (exit 77) of stage NAME a failure, if any
required_by() {
  case " ${XL_REQUIRE_STAGES:-} " in *" $1 "*) echo "XL_REQUIRE_STAGES"; return ;; esac
  case $1 in
    test-docker) if [ "${XL_REQUIRE_DOCKER:-0}" = 1 ]; then echo "XL_REQUIRE_DOCKER=1"; fi ;;
    test-arm64) if [ "${XL_REQUIRE_ARM64:-0}" = 1 ]; then echo "XL_REQUIRE_ARM64=1"; fi ;;
  esac
}

stages=() ctest_args=()
while [ $# -gt 0 ]; do
  known=0
  for s in "${BUILTIN_STAGES[@]}"; do [ "$1" = "$s" ] && known=1; done
  for e in "${EXTRA_STAGES[@]}"; do [ "$1" = "$(extra_name "$e")" ] && known=1; done
  if [ "$known" = 1 ] && [ ${#ctest_args[@]} -eq 0 ]; then stages+=("$1")
  elif [ "$1" = -R ] && [ $# -gt 1 ]; then RUN=$2; shift # ctest's name filter is RUN's
  elif [ "${1#-}" = "$1" ] && [ ${#ctest_args[@]} -eq 0 ]; then
    echo "tools/test.sh: no stage $1 (stages: ${BUILTIN_STAGES[*]}" \
         "$(for e in "${EXTRA_STAGES[@]}"; do extra_name "$e"; done))" >&2
    exit 2
  else ctest_args+=("$1"); fi
  shift
done
named=${#stages[@]}
if [ -n "${REPEAT:-}" ]; then
  case $REPEAT in
    '' | *[!0-9]* | 0) echo "tools/test.sh: REPEAT must be a positive number of runs, not '$REPEAT'" >&2
      exit 2 ;;
  esac
  ctest_args+=(--repeat "until-fail:$REPEAT")
fi
if [ "$named" -eq 0 ]; then
  stages=("${BUILTIN_STAGES[@]}")
  for e in "${EXTRA_STAGES[@]}"; do stages+=("$(extra_name "$e")"); done
fi

# Sanitizer reports with symbolized stacks (function, file:line): llvm-symbolizer comes with the
# test dependencies (tools/install-deps.sh test).
symbolizer=$(command -v llvm-symbolizer || ls /usr/lib/llvm-*/bin/llvm-symbolizer 2>/dev/null |
             sort -V | tail -1 || true)
if [ -z "$symbolizer" ]; then
  echo "warning: no llvm-symbolizer (tools/install-deps.sh test installs it): sanitizer stacks" \
       "will be bare addresses" >&2
fi
sym=${symbolizer:+:external_symbolizer_path=$symbolizer}
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1$sym
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1$sym
# TSan: every report is printed and the process then exits 66 (its exitcode), so a test that
# expects exit 0 fails; tests/tsan.supp explains each suppression.
export TSAN_OPTIONS=second_deadlock_stack=1:suppressions=$root/tests/tsan.supp$sym
# The daemon's default is one BLAS thread per worker; this keeps every other binary (CLI tools,
# unit tests) from starting OpenBLAS's own thread pool, whose threads TSan cannot see into.
export OPENBLAS_NUM_THREADS=1

# The loaded stage's spinning threads (tests/load/busy): stopped with the stage, or at exit.
load_pid=""
start_load() { # DIR: one spinning thread per core, bounded in time
  "$1/tests/busy" "${XL_LOAD_SECONDS:-2400}" "$jobs" &
  load_pid=$!
}
stop_load() {
  if [ -n "$load_pid" ]; then
    kill "$load_pid" 2>/dev/null || true
    wait "$load_pid" 2>/dev/null || true
    load_pid=""
  fi
}

ran=() skipped=() current="" why=""
join() { local out="" x; for x in "$@"; do out+="${out:+, }$x"; done; echo "$out"; }
summary() {
  local rc=$?
  stop_load
  local r s="" x
  r=$(join "${ran[@]+"${ran[@]}"}")
  for x in "${skipped[@]+"${skipped[@]}"}"; do s+="; $x"; done
  if [ "$rc" -ne 0 ]; then
    echo "=== FAILED in stage ${current:-setup} (exit $rc${why:+: $why}); passed before it: ${r:-none}$s"
  else
    echo "=== stages passed: ${r:-none}$s"
  fi
}
trap summary EXIT

# tests_in DIR REGEX: the names of the tests in DIR matching REGEX and, when set, RUN, less
# those matching STAGE_EXCLUDE when set.
tests_in() {
  ctest --test-dir "$1" -N 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: //p' | grep -E -- "$2" |
    { if [ -n "${RUN:-}" ]; then grep -E -- "$RUN"; else cat; fi; } |
    { if [ -n "${STAGE_EXCLUDE:-}" ]; then grep -Ev -- "$STAGE_EXCLUDE"; else cat; fi; } || true
}

# stage NAME DIR TEST_REGEX CMAKE_ARGS...: configure DIR, build, run the selected tests.
stage() {
  local name=$1 dir=$2 regex=$3; shift 3
  current=$name
  local t0=$SECONDS
  echo "=== $name: configure $dir ($*)"
  cmake -S . -B "$dir" -DXL_WERROR=ON "$@" >/dev/null
  local tests
  tests=$(tests_in "$dir" "$regex")
  if [ -z "$tests" ]; then
    echo "=== $name: no test matches RUN=${RUN:-}"
    skipped+=("$name skipped: no test matches RUN")
    return
  fi
  if [ -z "${RUN:-}" ] && [ -z "${LOAD:-}" ]; then
    echo "=== $name: build"
    cmake --build "$dir" -j "$jobs"
  else # only the targets the selected tests run: a unit test's executable, or the daemon
    local targets
    targets=$(for t in $tests; do
      case $t in
        unit.*) t=${t#unit.}; echo "${t%%.*}" ;; # unit.test_x.case runs test_x
        fuzz.*) echo "${t#fuzz.}"; echo fuzz_make_seeds ;;
        *) echo xlserve ;;
      esac
    done | sort -u)
    if [ -n "${LOAD:-}" ]; then targets+=" busy"; fi
    echo "=== $name: build" $targets
    # shellcheck disable=SC2086
    cmake --build "$dir" -j "$jobs" --target $targets
  fi
  if [ -n "${LOAD:-}" ]; then
    echo "=== $name: $jobs spinning threads (tests/load/busy) beside the tests"
    start_load "$dir"
  fi
  echo "=== $name: test" $tests
  # PARALLEL=N: N tests at once, one per core by default: most tests are one single-threaded
  # process (a unit test, a parity suite, a fuzzer with its own work directory) and none shares
  # files or ports with another. The loaded stage runs them one at a time beside its spinning
  # threads.
  local parallel=${PARALLEL:-$jobs}
  if [ -n "${LOAD:-}" ]; then parallel=1; fi
  ctest --test-dir "$dir" --output-on-failure -R "^($(echo $tests | tr ' ' '|' | sed 's/\./\\./g'))\$" \
    -j "$parallel" ${ctest_args[@]+"${ctest_args[@]}"}
  stop_load
  echo "=== $name: passed in $((SECONDS - t0)) s"
  ran+=("$name")
}

for s in "${stages[@]}"; do
  case $s in
    gcc) stage gcc build '^(unit|pytest|layers)\.' -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXL_SANITIZE=OFF ;;
    # the gcc build again (built already when the gcc stage ran), its timing assumptions tried on
    # a busy machine: the C unit tests once each (not again per CPU path) and the daemon over
    # HTTP, with one spinning thread per core beside them
    loaded) LOAD=1 stage loaded build '^(unit\.test_[a-z0-9_]+|pytest\.integration)$' \
              -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXL_SANITIZE=OFF ;;
    # the quality bounds (bits per byte of the bundled model per weight/memory type) are numbers,
    # not memory safety: minutes each in an unoptimised sanitizer build, while the unit tests
    # run the same kernels and whole models of every type under ASan
    # Parity once, on the automatic kernel family (the C unit tests run every family's kernels
    # and whole models under ASan; pytest.parity.PATH's numbers are the gcc stage's)
    asan) STAGE_EXCLUDE='quality|^pytest\.parity\.' stage asan build-asan '^(unit|pytest)\.' \
            -DCMAKE_BUILD_TYPE=Debug -DXL_SANITIZE=ON ;;
    tsan) stage tsan build-tsan '^(unit\.|pytest\.integration$)' -DCMAKE_BUILD_TYPE=RelWithDebInfo \
            -DXL_TSAN=ON ;;
    gcc-release) stage gcc-release build-gcc-release '^unit\.' -DCMAKE_BUILD_TYPE=Release ;;
    gcc-debug) stage gcc-debug build-gcc-debug '^unit\.' -DCMAKE_BUILD_TYPE=Debug ;;
    clang) CC=clang stage clang build-clang '^(unit|layers|format)\.' -DCMAKE_BUILD_TYPE=RelWithDebInfo ;;
    fuzz)
      if [ "${XL_SKIP_FUZZ:-0}" = 1 ]; then
        skipped+=("fuzz skipped: XL_SKIP_FUZZ=1")
      else
        CC=clang stage fuzz build-fuzz '^fuzz\.' -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXL_FUZZ=ON \
          -DXL_FUZZ_SECONDS="${XL_FUZZ_SECONDS:-60}"
      fi ;;
    *)
      for e in "${EXTRA_STAGES[@]}"; do
        [ "$s" = "$(extra_name "$e")" ] || continue
        current=$s
        if [ -n "${RUN:-}" ] && [ "$named" -eq 0 ]; then skipped+=("$s skipped: RUN is set"); continue; fi
        echo "=== $s: $e"
        # the arm64 stage compares its eval with the native binary's when the gcc stage built one
        if [ -x "$root/build/xlserve" ]; then export XL_NATIVE_BIN=$root/build/xlserve; fi
        t0=$SECONDS rc=0 out=$(mktemp)
        bash "$e" 2>&1 | tee "$out" || rc=$? # (pipefail: the script's status)
        # exit 77: cannot run here; the script's last line says why
        reason=$(grep -v '^[[:space:]]*$' "$out" | tail -1 | cut -c1-300)
        rm -f "$out"
        req=$(required_by "$s")
        if [ "$rc" = 77 ] && [ -n "$req" ]; then
          why="cannot run here, required by $req: ${reason:-no reason given}"
          exit "$rc"
        elif [ "$rc" = 77 ]; then skipped+=("$s skipped: ${reason:-no reason given}")
        elif [ "$rc" != 0 ]; then exit "$rc"
        else echo "=== $s: passed in $((SECONDS - t0)) s"; ran+=("$s"); fi
      done ;;
  esac
done
current=""

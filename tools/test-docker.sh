#!/usr/bin/env bash
# tools/test-docker.sh: CI's container stage. Builds the image of docker/Dockerfile and runs it
# on a real Docker engine: tests/deploy/test_docker_run.py (XL_DOCKER=1: health, a stream, a
# session across `docker restart`, the HEALTHCHECK following the port, a root-owned state
# directory, `docker stop` during streams exiting 0 with the streams finished, the compose
# file under docker-compose 1.29 with nginx in front, and the replicas compose file: Redis,
# three replicas, nginx, failover after a kill). Run as root on Debian 12, from anywhere:
#   tools/test-docker.sh
# What it sets up when missing:
#   - docker.io, docker-compose, debootstrap (apt-get; Debian's docker.io 20.10, compose 1.29);
#   - dockerd, when `docker info` finds none: started in the background (log in the work dir)
#     and stopped again at the end;
#   - the Dockerfile's base image (FROM debian:12): Docker Hub may be unreachable, so it is made
#     with `debootstrap --variant=minbase bookworm` + `docker import` under that name, with the
#     same apt sources as Debian's image. Kept for the next run.
# Everything else it makes (images xlserve-ci-RUN[-nginx|-redis], containers, volumes, networks, the
# compose project) is removed at the end, also on failure or timeout, except the newest build
# stage image (the compiled tree, label org.xlserve.stage=build: Docker's build cache), which
# makes the next run's build a matter of seconds when the C sources did not change.
# Environment: XL_DOCKER_TIMEOUT (whole-stage limit, s, default 2400), XL_DOCKER_BUILD_TIMEOUT
# (image builds, default 1500), XL_DOCKER_KEEP_IMAGES=1 (keep the built images), PYTHON
# (default /usr/bin/python3), DEBIAN_MIRROR (debootstrap's, default http://deb.debian.org/debian),
# XL_DOCKERD (the engine started when none answers, default dockerd).
# Exit 0 when every check passed; 77 when this machine cannot run containers (not root; the
# packages missing and not installable; dockerd exits at its start, e.g. no cgroups mounted or
# no privileges inside a container), with the reason as the last line (tools/test.sh shows it,
# and fails instead under XL_REQUIRE_DOCKER=1); else 1 with the failing step named. Last line
# otherwise: a summary with the time each step took.
set -uo pipefail
STAGE_TIMEOUT=${XL_DOCKER_TIMEOUT:-2400}
# the whole stage is bounded: rerun under timeout(1), whose SIGTERM ends it through the cleanup
if [ -z "${XL_DOCKER_BOUNDED:-}" ]; then
  XL_DOCKER_BOUNDED=1 exec timeout --kill-after=180 "$STAGE_TIMEOUT" "$0" "$@"
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-/usr/bin/python3}
BUILD_TIMEOUT=${XL_DOCKER_BUILD_TIMEOUT:-1500}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
RUN_ID="xlci$$"
IMAGE="xlserve-ci-$RUN_ID"
NGINX_IMAGE="xlserve-ci-$RUN_ID-nginx"
REDIS_IMAGE="xlserve-ci-$RUN_ID-redis"
WORK=$(mktemp -d /tmp/xl-test-docker.XXXXXX)
export IMAGE NGINX_IMAGE REDIS_IMAGE WORK MIRROR   # (for the step functions)
T_START=$(date +%s)
STEPS=()            # "name=seconds" for the summary
DOCKERD_PID=""
STEP="setup"
CANNOT=""           # why this machine cannot run the stage (exit 77)

say() { echo "test-docker: $*"; }
summary() {
  echo "test-docker: $1 in $(($(date +%s) - T_START)) s (${STEPS[*]:-no steps})"
}
fail() {
  say "FAILED at step '$STEP': $*" >&2
  exit 1
}
# cannot_run WHY: this machine cannot run containers: exit 77, WHY the last line
cannot_run() {
  CANNOT=$*
  exit 77
}
# run_step NAME TIMEOUT CMD...: CMD (a command, or a function of this script, which then
# runs in a child bash with the exported variables) under a time limit, timed into the summary
run_step() {
  local name=$1 limit=$2 t0 rc
  shift 2
  STEP=$name
  t0=$(date +%s)
  say "step $name (limit ${limit} s)"
  if declare -F "$1" >/dev/null; then
    timeout --kill-after=20 "$limit" bash -c "set -uo pipefail; $(declare -f say "$1"); $1"
  else
    timeout --kill-after=20 "$limit" "$@"
  fi
  rc=$?
  STEPS+=("$name=$(($(date +%s) - t0))s")
  if [ $rc = 124 ] || [ $rc = 137 ]; then fail "timed out after ${limit} s"; fi
  [ $rc = 0 ] || fail "exit $rc"
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    if command -v docker-compose >/dev/null; then
      # the test's compose project (its fixture removes it; this is for a killed run)
      XLSERVE_IMAGE=$IMAGE XLSERVE_NGINX_IMAGE=$NGINX_IMAGE timeout 120 docker-compose \
        -f docker/compose.yaml -p "$RUN_ID" down -v --timeout 5 >/dev/null 2>&1
      XLSERVE_IMAGE=$IMAGE XLSERVE_NGINX_IMAGE=$NGINX_IMAGE XLSERVE_REDIS_IMAGE=$REDIS_IMAGE \
        timeout 120 docker-compose -f docker/compose-replicas.yaml -p "${RUN_ID}r" down -v \
        --timeout 5 >/dev/null 2>&1
    fi
    ids=$(docker ps -aq --filter "label=xlserve.test.run=$RUN_ID")
    [ -n "$ids" ] && timeout 120 docker rm -f -v $ids >/dev/null 2>&1
    vols=$(docker volume ls -q --filter "label=xlserve.test.run=$RUN_ID")
    [ -n "$vols" ] && timeout 60 docker volume rm -f $vols >/dev/null 2>&1
    if [ "${XL_DOCKER_KEEP_IMAGES:-0}" != 1 ]; then
      timeout 120 docker rmi -f "$IMAGE" "$NGINX_IMAGE" "$REDIS_IMAGE" >/dev/null 2>&1
      # the build stage's cache (the compile): the newest kept for the next run, older removed
      old=$(docker images -q --filter dangling=true --filter label=org.xlserve.stage=build |
            tail -n +2)
      [ -n "$old" ] && timeout 120 docker rmi $old >/dev/null 2>&1
    fi
  fi
  if [ -n "$DOCKERD_PID" ]; then
    kill -TERM "$DOCKERD_PID" 2>/dev/null
    for _ in $(seq 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -rf "$WORK"
  if [ $rc = 77 ] && [ -n "$CANNOT" ]; then
    summary "cannot run here"
    echo "$CANNOT" # the reason, as the last line
  elif [ $rc = 0 ]; then summary "passed"; else summary "FAILED at step '$STEP'"; fi
  exit $rc
}
trap cleanup EXIT
trap 'fail "interrupted or past the stage limit (${STAGE_TIMEOUT} s)"' INT TERM

[ "$(id -u)" = 0 ] ||
  cannot_run "not root (the container stage installs packages, starts dockerd, runs debootstrap)"

# ---- packages
DOCKERD=${XL_DOCKERD:-dockerd}
need=()
command -v "$DOCKERD" >/dev/null || need+=(docker.io)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  STEP=install
  say "installing ${need[*]}"
  t0=$(date +%s)
  timeout --kill-after=20 900 env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    -o DPkg::Lock::Timeout=600 --no-install-recommends "${need[@]}" ||
    cannot_run "${need[*]} not installed, and apt-get install failed (exit $?)"
  STEPS+=("install=$(($(date +%s) - t0))s")
fi
command -v docker >/dev/null || fail "no docker client after installing docker.io"

# ---- the engine
if ! timeout 20 docker info >/dev/null 2>&1; then
  STEP=dockerd
  say "starting $DOCKERD (log: $WORK/dockerd.log)"
  setsid "$DOCKERD" >"$WORK/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 120); do
    timeout 5 docker info >/dev/null 2>&1 && break
    if ! kill -0 "$DOCKERD_PID" 2>/dev/null; then
      # it exited at its start: this machine cannot run it (no cgroups, no privileges, ...)
      tail -20 "$WORK/dockerd.log" >&2
      drc=0
      wait "$DOCKERD_PID" || drc=$?
      DOCKERD_PID=""
      last=$(grep -v '^[[:space:]]*$' "$WORK/dockerd.log" | tail -1 |
             sed 's/^.*level=[a-z]* msg=//; s/^"//; s/"$//' | cut -c1-200)
      cannot_run "$DOCKERD cannot start here (exit $drc): ${last:-it printed nothing}"
    fi
    sleep 0.5
  done
  timeout 5 docker info >/dev/null 2>&1 || { tail -20 "$WORK/dockerd.log" >&2; fail "dockerd not ready in 60 s"; }
fi
say "docker: $(docker version -f 'client {{.Client.Version}}, server {{.Server.Version}}' 2>&1);" \
    "$(docker-compose version --short 2>&1 | head -1 | sed 's/^/docker-compose /')"

# ---- the base image
BASES=$(sed -n 's/^FROM \([^ ]*\).*/\1/p' docker/Dockerfile | sort -u)
export BASES
[ "$BASES" = "debian:12" ] || [ "$BASES" = "debian:bookworm" ] ||
  fail "the Dockerfile's base images are '$(echo $BASES)'; this script makes debian:12 only"
make_base() {
  local root="$WORK/rootfs"
  debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
    { tail -20 "$WORK/debootstrap.log" >&2; return 1; }
  # the apt sources of Debian's own image (updates and security too), no lists, no debs
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" --numeric-owner -c . | docker import --change 'CMD ["bash"]' - "$BASES" ||
    return 1
  rm -rf "$root"
}
if docker image inspect "$BASES" >/dev/null 2>&1; then
  say "base image $BASES: cached"
else
  run_step base-image 1200 make_base
fi

# ---- the images (the default target, and nginx and redis for the compose files)
build() {
  docker build -f docker/Dockerfile -t "$IMAGE" . >"$WORK/build.log" 2>&1 &&
    docker build -f docker/Dockerfile --target nginx -t "$NGINX_IMAGE" . >>"$WORK/build.log" 2>&1 &&
    docker build -f docker/Dockerfile --target redis -t "$REDIS_IMAGE" . >>"$WORK/build.log" 2>&1 ||
    { tail -40 "$WORK/build.log" >&2; return 1; }
  say "image $IMAGE: $(($(docker image inspect -f '{{.Size}}' "$IMAGE") / 1000000)) MB"
}
run_step build "$BUILD_TIMEOUT" build

# ---- the container checks
run_step containers 1200 env XL_DOCKER=1 XL_DOCKER_IMAGE="$IMAGE" XL_DOCKER_NGINX_IMAGE="$NGINX_IMAGE" \
  XL_DOCKER_REDIS_IMAGE="$REDIS_IMAGE" \
  XL_DOCKER_RUN="$RUN_ID" XL_SOURCE_DIR="$ROOT" PYTHONPATH="$ROOT/tools${PYTHONPATH:+:$PYTHONPATH}" \
  "$PYTHON" -m pytest -q -p no:cacheprovider -s -rs tests/deploy/test_docker_run.py
STEP=done

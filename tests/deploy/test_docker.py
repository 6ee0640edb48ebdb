"""The Docker files, without a Docker engine (none runs here): the Dockerfile is a thin wrapper
over what the rest of this suite tests (tools/install-deps.sh, cmake, `cmake --install`, the
shipped nginx config), so the checks are that it uses exactly those, that the runtime stage's
packages provide every library the binary links, and the image's contract (Debian 12, non-root,
HEALTHCHECK on /health, the bundled model inside, SIGTERM to the daemon)."""
import os
import re
import shutil
import subprocess

import pytest

import xlharness as X
from deployharness import ROOT

DOCKERFILE = os.path.join(ROOT, "docker", "Dockerfile")
COMPOSE = os.path.join(ROOT, "docker", "compose.yaml")
# dependencies of Debian's essential packages: in every debian:12 image (and debootstrap minbase)
IN_EVERY_DEBIAN_IMAGE = {"libc6", "libgcc-s1"}


def instructions():
    """[(stage, INSTRUCTION, args)] with continuation lines joined and comments dropped."""
    with open(DOCKERFILE) as f:
        text = re.sub(r"\\\n", " ", f.read())
    out, stage = [], None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, args = line.partition(" ")
        if op.upper() == "FROM":
            stage = args.split(" AS ")[-1].strip() if " AS " in args else "final"
        out.append((stage, op.upper(), args.strip()))
    return out


def test_dockerfile_wraps_the_tested_scripts():
    ins = instructions()
    froms = [a for _, op, a in ins if op == "FROM"]
    assert froms and all(re.match(r"debian:(12|bookworm)\b", f) for f in froms), froms
    runs = " ".join(a for _, op, a in ins if op == "RUN")
    assert "/tmp/install-deps.sh build" in runs and "/tmp/install-deps.sh runtime" in runs
    assert "cmake --install" in runs and "DESTDIR=/staging" in runs
    # every COPY source from the build context exists
    for _, op, a in ins:
        if op == "COPY" and not a.startswith("--from"):
            src = a.split()[0]
            assert src == "." or os.path.exists(os.path.join(ROOT, src)), src
    # the nginx stage ships the tested config
    assert ("nginx", "COPY", "config/nginx/xlserve.conf /etc/nginx/conf.d/xlserve.conf") in ins
    # the final stage: non-root, the health check, the installed binary as PID 1 with the
    # installed config (whose default model is the installed bundled model: test_install)
    final = [(op, a) for st, op, a in ins if st == "final"]
    user = [a for op, a in final if op == "USER"]
    assert user and user[-1].split(":")[0] not in ("root", "0")
    hc = [a for op, a in final if op == "HEALTHCHECK"]
    assert hc and "/health" in hc[0] and "curl -fsS" in hc[0]
    ep = [a for op, a in final if op == "ENTRYPOINT"]
    assert ep == ['["/usr/local/bin/xlserve", "serve", "--config", "/etc/xlserve/xlserve.conf"]']
    assert ("COPY", "--from=build /staging/ /") in final
    # the image checks itself at build time: the binary runs on the runtime packages, its
    # default model is the installed bundled one, and that model loads
    checks = " ".join(a for op, a in final if op == "RUN")
    assert "--dump-config | grep -q '^model /usr/local/share/xlserve/models/austen-byte '" in checks
    assert "xlserve info" in checks
    env = " ".join(a for op, a in final if op == "ENV")
    assert "XLSERVE_HOST=0.0.0.0" in env and "XLSERVE_STATE_DIR=/var/lib/xlserve" in env
    # the options the image sets are options of the daemon
    r = subprocess.run([X.xlserve_bin(), "serve", "--help"], capture_output=True, text=True)
    for var in re.findall(r"(XLSERVE_[A-Z_]+)=", env):
        assert var in r.stdout, var


def test_dockerignore_keeps_build_trees_out():
    with open(os.path.join(ROOT, ".dockerignore")) as f:
        pats = [l.strip() for l in f if l.strip() and not l.startswith("#")]
    for p in ("/build*", "/.git", "/runs", "/corpus-data"):
        assert p in pats, p
    assert not any(p.startswith(("/models", "models", "/config", "/tools")) for p in pats)


def test_compose_puts_the_shipped_nginx_in_front():
    with open(COMPOSE) as f:
        text = f.read()
    assert re.search(r"(?m)^  xlserve:$", text) and re.search(r"(?m)^  nginx:$", text)
    assert 'network_mode: "service:xlserve"' in text  # so the shipped 127.0.0.1:8080 upstream holds
    assert "target: nginx" in text and "dockerfile: docker/Dockerfile" in text
    assert "XLSERVE_TRUSTED_PROXIES: 127.0.0.1" in text
    assert "condition: service_healthy" in text
    assert re.search(r"stop_grace_period: (\d+)s", text)
    grace = int(re.search(r"stop_grace_period: (\d+)s", text).group(1))
    assert grace > 30  # drain_timeout's default


def test_runtime_packages_provide_every_linked_library():
    """tools/install-deps.sh runtime (the image's final stage) installs the package of every
    library the daemon links directly (their own dependencies come with them)."""
    if not shutil.which("dpkg") or not shutil.which("ldd"):
        pytest.skip("needs dpkg and ldd (Debian)")
    binary = X.xlserve_bin()
    if "libasan" in subprocess.run(["ldd", binary], capture_output=True, text=True).stdout:
        pytest.skip("a sanitizer build links the sanitizer runtimes; the image builds without")
    runtime = subprocess.run(["bash", os.path.join(ROOT, "tools/install-deps.sh"), "--print",
                              "runtime"], capture_output=True, text=True, check=True).stdout.split()
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]",
                        subprocess.run(["readelf", "-dW", binary], capture_output=True,
                                       text=True, check=True).stdout)
    paths = dict(re.findall(r"^\s*(\S+) => (\S+)", subprocess.run(
        ["ldd", binary], capture_output=True, text=True, check=True).stdout, re.M))
    assert needed
    for soname in needed:
        path = os.path.realpath(paths[soname])
        pkg = None
        for candidate in (path, path.replace("/usr/lib/", "/lib/", 1)):
            r = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
            if r.returncode == 0:
                pkg = r.stdout.split(":")[0]
                break
        assert pkg, soname
        prio = subprocess.run(["dpkg-query", "-W", "-f=${Priority}", pkg], capture_output=True,
                              text=True).stdout
        assert pkg in runtime or pkg in IN_EVERY_DEBIAN_IMAGE or prio == "required", (soname, pkg)

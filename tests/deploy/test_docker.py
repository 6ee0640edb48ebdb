"""The Docker files, without a Docker engine (tests/deploy/test_docker_run.py runs the image
and the compose file on one: tools/test-docker.sh). The Dockerfile is a thin wrapper over what
the rest of this suite tests (tools/install-deps.sh, cmake, `cmake --install`, the shipped nginx
config), so the checks are that it uses exactly those, that the runtime stage's packages provide
every library the binary links, and the image's contract (Debian 12, non-root, no apt lists, the
bundled model inside, SIGTERM to the daemon, a stop timeout above the drain). Its scripts run
here against real daemons: the health check (found by the daemon's sockets and options, not by
a port written in the image) and the compose file's nginx config (made from the shipped one)."""
import os
import re
import ipaddress
import shutil
import signal
import subprocess
import time

import pytest

import xlharness as X
import deployharness as N
from deployharness import ROOT

DOCKERFILE = os.path.join(ROOT, "docker", "Dockerfile")
COMPOSE = os.path.join(ROOT, "docker", "compose.yaml")
HEALTHCHECK = os.path.join(ROOT, "docker", "xlserve-healthcheck")
ENTRYPOINT = os.path.join(ROOT, "docker", "xlserve-entrypoint")
NGINX_COMPOSE_CONF = os.path.join(ROOT, "docker", "nginx-compose-conf")
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
            for src in a.split()[:-1]:
                assert src == "." or os.path.exists(os.path.join(ROOT, src)), src
    # every apt run leaves no package lists and no downloaded packages, whatever the base
    # image's apt settings
    for st, op, a in ins:
        if op == "RUN" and ("apt-get install" in a or "install-deps.sh" in a):
            assert "apt-get clean" in a and "rm -rf /var/lib/apt/lists/*" in a, (st, a)
    # the nginx stage ships the tested config, made into the compose service's
    assert ("nginx", "COPY", "config/nginx/xlserve.conf /usr/local/share/xlserve/nginx/xlserve.conf") in ins
    nginx_runs = " ".join(a for st, op, a in ins if st == "nginx" and op == "RUN")
    assert "nginx-compose-conf xlserve:8080 < /usr/local/share/xlserve/nginx/xlserve.conf" in nginx_runs
    assert "> /etc/nginx/conf.d/xlserve.conf" in nginx_runs and "nginx -t" in nginx_runs
    # the final stage: non-root, the health check, the installed binary as PID 1 with the
    # installed config (whose default model is the installed bundled model: test_install)
    final = [(op, a) for st, op, a in ins if st == "final"]
    user = [a for op, a in final if op == "USER"]
    assert user and user[-1].split(":")[0] not in ("root", "0")
    hc = [a for op, a in final if op == "HEALTHCHECK"]
    assert hc and hc[0].endswith('CMD ["/usr/local/bin/xlserve-healthcheck"]'), hc
    ep = [a for op, a in final if op == "ENTRYPOINT"]
    assert ep == ['["/usr/local/bin/xlserve-entrypoint"]']
    assert ("COPY", "--from=build /staging/ /") in final
    assert ("COPY", "docker/xlserve-entrypoint docker/xlserve-healthcheck /usr/local/bin/") in final
    # the entrypoint ends in the installed binary with the installed config, as PID 1
    with open(ENTRYPOINT) as f:
        text = f.read()
    assert 'set -- "$XLSERVE" serve --config /etc/xlserve/xlserve.conf "$@"' in text
    assert "XLSERVE=/usr/local/bin/xlserve" in text
    assert text.rstrip().endswith('exec "$@"')
    assert 'exec setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --init-groups "$@"' in text
    # the image checks itself at build time: the binary runs on the runtime packages, its
    # default model is the installed bundled one, and that model loads
    checks = " ".join(a for op, a in final if op == "RUN")
    assert "--dump-config | grep -q '^model /usr/local/share/xlserve/models/austen-byte '" in checks
    assert "xlserve info" in checks
    env = " ".join(a for op, a in final if op == "ENV")
    assert "XLSERVE_HOST=0.0.0.0" in env and "XLSERVE_STATE_DIR=/var/lib/xlserve" in env
    # not the port: variables beat the config file, whose port must apply
    assert "XLSERVE_PORT" not in env
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


def drain_timeout_default():
    out = subprocess.run([X.xlserve_bin(), "serve", "--dump-config"], capture_output=True,
                         text=True, check=True,
                         env={k: v for k, v in os.environ.items() if not k.startswith("XLSERVE_")}
                         ).stdout
    return int(re.search(r"(?m)^drain_timeout (\d+)", out).group(1))


def test_readme_docker_run_stops_after_the_drain():
    """docker stop's default (10 s before SIGKILL) cuts streams the drain would finish."""
    with open(os.path.join(ROOT, "README.md")) as f:
        runs = [l for l in f.read().splitlines() if l.startswith("docker run ")]
    assert runs
    for line in runs:
        m = re.search(r"--stop-timeout (\d+)", line)
        assert m and int(m.group(1)) > drain_timeout_default(), line


def test_compose_file_nginx_in_front_on_its_own_network():
    yaml = pytest.importorskip("yaml")
    with open(COMPOSE) as f:
        doc = yaml.safe_load(f)
    # docker-compose 1.29 (Debian 12) refuses a top-level name: (the project name is in .env)
    assert set(doc) <= {"services", "networks", "volumes"}, set(doc)
    with open(os.path.join(ROOT, "docker", ".env")) as f:
        assert re.search(r"(?m)^COMPOSE_PROJECT_NAME=xlserve$", f.read())
    xl, ngx = doc["services"]["xlserve"], doc["services"]["nginx"]
    assert xl["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}
    assert ngx["build"] == {"context": "..", "dockerfile": "docker/Dockerfile", "target": "nginx"}
    # own network namespaces, one network; only nginx is published
    for svc in (xl, ngx):
        assert "network_mode" not in svc
    assert "ports" not in xl and ngx["ports"] == ["${XLSERVE_HTTP_PORT:-8080}:80"]
    assert xl["networks"] == ["xlserve"] and list(ngx["networks"]) == ["xlserve"]
    # the daemon trusts nginx's fixed address, which is in the network's subnet
    addr = ngx["networks"]["xlserve"]["ipv4_address"]
    assert xl["environment"]["XLSERVE_TRUSTED_PROXIES"] == addr
    ipam = doc["networks"]["xlserve"]["ipam"]["config"][0]
    assert ipaddress.ip_address(addr) in ipaddress.ip_network(ipam["subnet"])
    # ... and outside the range Docker gives other containers (the daemon's) addresses from
    assert ipaddress.ip_address(addr) not in ipaddress.ip_network(ipam["ip_range"])
    assert ipaddress.ip_network(ipam["ip_range"]).subnet_of(ipaddress.ip_network(ipam["subnet"]))
    # nginx starts once the daemon is healthy; both get longer than the drain to stop
    assert ngx["depends_on"] == {"xlserve": {"condition": "service_healthy"}}
    for svc in (xl, ngx):
        grace = re.fullmatch(r"(\d+)s", svc["stop_grace_period"])
        assert grace and int(grace.group(1)) > drain_timeout_default(), svc
        assert svc["restart"] == "unless-stopped"
    assert xl["volumes"] == ["xlserve-state:/var/lib/xlserve"]


def test_compose_file_loads_with_docker_compose():
    """Debian 12's docker-compose (1.29) loads it (where installed: tools/test-docker.sh
    installs it; compose v2 is not packaged for Debian 12)."""
    exe = shutil.which("docker-compose")
    if not exe:
        pytest.skip("docker-compose is not installed")
    r = subprocess.run([exe, "-f", COMPOSE, "config", "-q"], capture_output=True, text=True,
                       timeout=60, cwd="/")
    assert r.returncode == 0, r.stderr


def test_healthcheck_asks_the_daemon_wherever_it_listens(tiny_model, start_daemon):
    """The image's health check finds the daemon's port (here an ephemeral one: --port 0) and
    path prefix from the daemon itself."""
    d = start_daemon(tiny_model, "--path-prefix", "/xl/v2", prefix="/xl/v2")
    r = subprocess.run([HEALTHCHECK, str(d.proc.pid)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "healthy: http://127.0.0.1:%d/xl/v2/health 200" % d.port
    # an IPv6 daemon on :: is reached too
    d6 = start_daemon(tiny_model, "--host", "::", wait_ready=False)   # (the harness asks 127.0.0.1)
    deadline = time.monotonic() + 30
    while True:   # unhealthy ("loading") until the model is loaded
        r = subprocess.run([HEALTHCHECK, str(d6.proc.pid)], capture_output=True, text=True,
                           timeout=30)
        if r.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert r.returncode == 0 and ("]:%d/health 200" % d6.port) in r.stdout, r.stdout + r.stderr
    # a daemon that does not answer (frozen: its socket's backlog accepts, nothing replies)
    d.signal(signal.SIGSTOP)
    try:
        r = subprocess.run([HEALTHCHECK, str(d.proc.pid)], capture_output=True, text=True,
                           timeout=30, env=dict(os.environ, XLSERVE_HEALTHCHECK_TIMEOUT="1"))
        assert r.returncode == 1 and r.stdout.startswith("unhealthy: "), r.stdout + r.stderr
    finally:
        d.signal(signal.SIGCONT)
    r = subprocess.run([HEALTHCHECK, "999999999"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "no xlserve process" in r.stdout, r.stdout


def test_compose_nginx_config_is_the_shipped_one_proxying_to_a_service(tiny_model, start_daemon,
                                                                          tmp_path):
    """docker/nginx-compose-conf turns the shipped config's upstream into a service name looked
    up at request time; the result (with an address for the service) proxies and streams."""
    if not N.nginx_bin():
        pytest.skip("nginx is not installed")
    with open(N.SHIPPED) as f:
        shipped = f.read()
    d = start_daemon(tiny_model)
    r = subprocess.run([NGINX_COMPOSE_CONF, "127.0.0.1:%d" % d.port], input=shipped,
                       capture_output=True, text=True, check=True)
    conf = r.stdout
    assert "upstream xlserve" not in conf and "proxy_pass http://xlserve;" not in conf
    assert conf.count("proxy_pass http://$xlserve_upstream;") == 2
    assert "resolver 127.0.0.11 valid=5s" in conf
    # the rest is the shipped file, line for line and in order
    start = shipped.index("upstream xlserve {")
    end = shipped.index("\n}\n", start) + 3
    rest = [l for l in (shipped[:start] + shipped[end:]).splitlines() if "proxy_pass" not in l]
    it = iter(conf.splitlines())
    assert all(any(l == c for c in it) for l in rest)   # rest is a subsequence of conf
    (tmp_path / "compose.conf").write_text(conf)
    ngx = N.Nginx(tmp_path / "nginx", None, shipped=str(tmp_path / "compose.conf"))
    try:
        st, _, b = X.request(ngx.port, "GET", "/health")
        assert st == 200, b
        st, _, ev = X.stream(ngx.port, "/v1/completions",
                             {"prompt": "ab", "max_tokens": 8, "stream": True})
        assert st == 200 and ev[-1][1] == "[DONE]", ev
    finally:
        ngx.stop()
    # a shipped file this cannot follow fails loudly
    r = subprocess.run([NGINX_COMPOSE_CONF], input=shipped.replace("upstream xlserve {", "upstream xl {"),
                       capture_output=True, text=True)
    assert r.returncode != 0 and "expected one `upstream xlserve {` block" in r.stderr


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

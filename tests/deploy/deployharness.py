"""deployharness.py: helpers of the deployment suite.
- The build under test: its CMake cache, `cmake --install` of it into a DESTDIR.
- Debian's nginx, unprivileged on loopback, in front of test daemons, with the SHIPPED
  config/nginx/xlserve.conf included as is except for its listen port and its upstream server
  lines (each replacement must match exactly once, so a change to the shipped file that the
  test cannot follow fails loudly); its own prefix, pid, logs and temp dirs under tmp."""
import os
import re
import shutil
import socket
import subprocess
import time

from xlharness import free_port

ROOT = os.environ.get("XL_SOURCE_DIR",
                      os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = os.environ.get("XL_BUILD_DIR", os.path.join(ROOT, "build"))


def build_cache(name):
    """A CMakeCache.txt entry of the build under test (None when absent)."""
    with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
        m = re.search(r"(?m)^%s:[A-Z]+=(.*)$" % re.escape(name), f.read())
    return m.group(1) if m else None


def cmake_install(dest):
    """`DESTDIR=dest cmake --install BUILD`; returns its output."""
    r = subprocess.run(["cmake", "--install", BUILD], env=dict(os.environ, DESTDIR=str(dest)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


SHIPPED = os.path.join(ROOT, "config", "nginx", "xlserve.conf")


def nginx_bin():
    return shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx")
                                     else None)


def template(text, listen_port, upstreams):
    """The shipped config with `listen 80;` -> 127.0.0.1:PORT and the upstream's server line ->
    one line per (host, port); upstreams None: the upstream left as it is."""
    text, n = re.subn(r"(?m)^(\s*)listen 80;", r"\g<1>listen 127.0.0.1:%d;" % listen_port, text)
    assert n == 1, "the shipped config's `listen 80;` line changed"
    if upstreams is None:
        return text
    servers = "".join("    server %s:%d;\n" % (h, p) for h, p in upstreams)
    text, n = re.subn(r"(?m)^\s*server 127\.0\.0\.1:8080;\n", lambda m: servers, text)
    assert n == 1, "the shipped config's `server 127.0.0.1:8080;` upstream line changed"
    return text


class Nginx:
    def __init__(self, tmp, upstreams, shipped=SHIPPED):
        self.prefix = p = str(tmp)
        os.makedirs(self.prefix, exist_ok=True)
        for d in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            os.makedirs(os.path.join(self.prefix, d), exist_ok=True)
        main = [
            # as root, the workers would otherwise switch to nobody (no access to tmp)
            "user root;" if os.geteuid() == 0 else "",
            "worker_processes 1;", "daemon off;", "pid %s/nginx.pid;" % p,
            "error_log %s/error.log info;" % p,
            "events { worker_connections 512; }",
            "http {",
            "  access_log %s/access.log;" % p,
            "  client_body_temp_path %s/client_body;" % p,
            "  proxy_temp_path %s/proxy;" % p,
            "  fastcgi_temp_path %s/fastcgi;" % p,
            "  uwsgi_temp_path %s/uwsgi;" % p,
            "  scgi_temp_path %s/scgi;" % p,
            "  include %s/xlserve.conf;" % p,
            "}",
        ]
        self.conf = os.path.join(p, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write("\n".join(main) + "\n")
        with open(shipped) as f:
            text = f.read()
        cmd = [nginx_bin(), "-p", p + "/", "-c", self.conf, "-e", p + "/error.log"]
        for attempt in range(3):  # another process may take the free port before nginx does
            self.port = free_port()
            with open(os.path.join(self.prefix, "xlserve.conf"), "w") as f:
                f.write(template(text, self.port, upstreams))
            t = subprocess.run(cmd + ["-t"], capture_output=True, text=True)
            assert t.returncode == 0, t.stderr
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if self._wait_listening():
                return
            self.stop()
            if "Address already in use" not in self.error_log():
                break
        raise AssertionError("nginx did not start:\n" + self.error_log())

    def _wait_listening(self):
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    return False
                time.sleep(0.05)

    def error_log(self):
        try:
            with open(os.path.join(self.prefix, "error.log")) as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()  # fast shutdown of master and workers
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()

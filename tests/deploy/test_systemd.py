"""systemd: the notify protocol as the daemon speaks it (READY=1 only once /health answers 200,
WATCHDOG=1 at half of WATCHDOG_USEC, STOPPING=1 on SIGTERM; abstract and path sockets), the
shipped unit (systemd-analyze verify and security on the installed unit), and two of its
sandbox settings checked against the real daemon: MemoryDenyWriteExecute (the kernel's
PR_SET_MDWE, the same rule) and SystemCallFilter / RestrictAddressFamilies (every system call
and socket family of a whole run under strace is allowed by the unit)."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

import xlharness as X
from deployharness import build_cache

ROOT = os.environ.get("XL_SOURCE_DIR",
                      os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def sanitized_build():
    return build_cache("XL_SANITIZE") == "ON"


def store_args(tmp_path):
    """--state-dir DIR, so the sandbox checks cover the session store's file I/O (the unit
    gives it XLSERVE_STATE_DIR=/var/lib/xlserve)."""
    (tmp_path / "state").mkdir(exist_ok=True)
    return ["--state-dir", str(tmp_path / "state")]


class NotifySocket:
    """A datagram socket standing in for systemd's; collects (arrival time, message)."""

    def __init__(self, path=None):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if path is None:  # abstract namespace: NOTIFY_SOCKET=@name
            name = "xlserve-test-%d-%s" % (os.getpid(), os.urandom(4).hex())
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self.sock.bind(path)
            self.address = path
        self.msgs = []
        self.cv = threading.Condition()
        self.closed = False
        self.thread = threading.Thread(target=self._recv, daemon=True)
        self.thread.start()

    def _recv(self):
        self.sock.settimeout(0.1)
        while not self.closed:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            with self.cv:
                self.msgs.append((time.monotonic(), data.decode()))
                self.cv.notify_all()

    def wait_for(self, pred, timeout=20):
        deadline = time.monotonic() + timeout
        with self.cv:
            i = 0
            while True:
                while i < len(self.msgs):
                    if pred(self.msgs[i][1]):
                        return self.msgs[i]
                    i += 1
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("notify message not seen; got %r" % self.msgs[-20:])
                self.cv.wait(left)

    def states(self, key):
        """Arrival times of messages carrying KEY=..."""
        with self.cv:
            return [t for t, m in self.msgs if any(l.startswith(key + "=") for l in m.split("\n"))]

    def close(self):
        self.closed = True
        self.thread.join(5)
        self.sock.close()


def fifo_model(tmp_path, model):
    """A copy of MODEL whose config.json is a FIFO: the daemon's model load blocks on it until
    feed() writes the real file, so the test controls when loading ends."""
    d = tmp_path / "held-model"
    shutil.copytree(model, d)
    with open(d / "config.json", "rb") as f:
        content = f.read()
    os.unlink(d / "config.json")
    os.mkfifo(d / "config.json")
    stop = threading.Event()

    def feeder():
        """The loader's open of the FIFO gets the whole file once; before that open sees its
        end of file, the real file replaces the FIFO, so any later open reads the file (writing
        the FIFO again could reach a slow reader that has not seen the end of the first copy)."""
        while not stop.is_set():
            try:
                fd = os.open(d / "config.json", os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: no reader yet
                time.sleep(0.01)
                continue
            os.set_blocking(fd, True)
            real = d / "config.json.real"
            real.write_bytes(content)
            try:
                os.write(fd, content)
            except BrokenPipeError:
                pass
            os.replace(real, d / "config.json")
            os.close(fd)
            return

    t = threading.Thread(target=feeder, daemon=True)
    return str(d), (lambda: t.start()), (lambda: (stop.set(), t.join(5)))


def test_notify_ready_after_health_watchdog_stopping(tmp_path, start_daemon, tiny_model):
    ns = NotifySocket()
    model, feed, stop_feeding = fifo_model(tmp_path, tiny_model)
    wd_usec = 1000000
    try:
        d = start_daemon(model, env={"NOTIFY_SOCKET": ns.address, "WATCHDOG_USEC": str(wd_usec)},
                         wait_ready=False)
        # listening, model load held: /health says 503 loading, and no READY=1 was sent
        t_end = time.monotonic() + 0.8
        while time.monotonic() < t_end:
            st, _, body = X.request(d.port, "GET", "/health")
            assert st == 503 and json.loads(body)["status"] == "loading"
            time.sleep(0.05)
        assert ns.states("READY") == []
        assert ns.states("WATCHDOG"), "the watchdog pings from the start"
        feed()
        t_ready, msg = ns.wait_for(lambda m: "READY=1" in m.split("\n"))
        # the first /health after READY=1 already answers 200
        st, _, body = X.request(d.port, "GET", "/health")
        assert st == 200 and json.loads(body)["status"] == "ok"
        assert re.search(r"(?m)^STATUS=serving held-model on 127\.0\.0\.1 port %d$" % d.port, msg)
        assert d.wait_log(lambda o: o.get("event") == "ready")
        # WATCHDOG=1 at half the interval, each well within WATCHDOG_USEC of the previous one
        time.sleep(3.0)
        pings = ns.states("WATCHDOG")
        pings = [t for t in pings if t >= t_ready - 1.0]
        gaps = [b - a for a, b in zip(pings, pings[1:])]
        assert len(gaps) >= 5, pings
        assert max(gaps) < wd_usec / 1e6, gaps
        assert 0.5 * wd_usec / 2e6 < sum(gaps) / len(gaps) < 1.5 * wd_usec / 2e6, gaps
        assert len(ns.states("READY")) == 1
        # SIGTERM: STOPPING=1, then a clean exit
        d.signal(signal.SIGTERM)
        ns.wait_for(lambda m: "STOPPING=1" in m.split("\n"))
        assert d.wait_exit(20) == 0, d.tail()
    finally:
        stop_feeding()
        ns.close()


def test_notify_path_socket_and_foreign_watchdog_pid(tmp_path, start_daemon, tiny_model):
    """A filesystem NOTIFY_SOCKET works too; WATCHDOG_PID naming another process means the
    watchdog is not ours (no pings); no NOTIFY_SOCKET: nothing is sent and nothing breaks."""
    ns = NotifySocket(str(tmp_path / "notify.sock"))
    try:
        d = start_daemon(tiny_model, env={"NOTIFY_SOCKET": ns.address, "WATCHDOG_USEC": "100000",
                                          "WATCHDOG_PID": str(os.getpid())})
        ns.wait_for(lambda m: "READY=1" in m.split("\n"))
        time.sleep(0.5)
        assert ns.states("WATCHDOG") == []
        d.signal(signal.SIGTERM)
        ns.wait_for(lambda m: "STOPPING=1" in m.split("\n"))
        assert d.wait_exit(20) == 0, d.tail()
    finally:
        ns.close()
    # a socket that does not exist: one warning in the log, the daemon serves normally
    d = start_daemon(tiny_model, env={"NOTIFY_SOCKET": str(tmp_path / "missing.sock")})
    st, _, _ = X.request(d.port, "GET", "/health")
    assert st == 200
    assert d.wait_log(lambda o: o.get("event") == "sd_notify")["level"] == "warn"


# ------------------------------------------------------------------------------------------------
# the unit


def unit_settings(text):
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            k, v = line.split("=", 1)
            out.setdefault(k, []).append(v)
    return out


def test_unit_verifies_and_is_hardened(tmp_path, installed):
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        pytest.skip("systemd-analyze is not installed (tools/install-deps.sh installs systemd)")
    dest, prefix = installed
    unit_path = os.path.join(dest + prefix, "lib/systemd/system/xlserve.service")
    with open(unit_path) as f:
        unit = f.read()
    s = unit_settings(unit)
    exec_start = s["ExecStart"][0].split()
    assert exec_start[0] == prefix + "/bin/xlserve" and exec_start[1] == "serve"
    conf = exec_start[exec_start.index("--config") + 1]
    assert os.path.isfile(dest + conf), conf
    # what the issue asks of the unit
    assert s["Type"] == ["notify"] and "WatchdogSec" in s
    assert s["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert s["DynamicUser"] == ["yes"] and s["StateDirectory"] == ["xlserve"]
    assert "XLSERVE_STATE_DIR=%S/xlserve" in s["Environment"]
    for k, v in [("ProtectSystem", "strict"), ("ProtectHome", "yes"), ("NoNewPrivileges", "yes"),
                 ("PrivateTmp", "yes"), ("MemoryDenyWriteExecute", "yes"),
                 ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6")]:
        assert s.get(k) == [v], k
    assert "@system-service" in s["SystemCallFilter"]
    # systemd-analyze verify checks every setting and that the commands exist: the installed
    # unit with only its two paths pointed into the DESTDIR (the host has no /usr/local/bin/xlserve)
    vdir = tmp_path / "verify"
    vdir.mkdir()
    (vdir / "xlserve.service").write_text(
        unit.replace(prefix + "/bin/xlserve", dest + prefix + "/bin/xlserve").replace(
            " " + conf, " " + dest + conf))
    r = subprocess.run([analyze, "verify", "--man=no", str(vdir / "xlserve.service")],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0 and re.search(r"Failed to (initialize|setup|connect)|not been booted",
                                       r.stderr):
        pytest.skip("systemd-analyze verify cannot run here: " + r.stderr.strip()[:300])
    assert r.returncode == 0 and r.stderr.strip() == "" and r.stdout.strip() == "", \
        r.stdout + r.stderr
    # a misspelt setting is caught the same way (the check is not vacuous)
    (vdir / "xlserve.service").write_text(
        (vdir / "xlserve.service").read_text().replace("ProtectSystem=strict",
                                                      "ProtectSystem=strickt"))
    r = subprocess.run([analyze, "verify", "--man=no", str(vdir / "xlserve.service")],
                       capture_output=True, text=True, timeout=60)
    assert "strickt" in r.stderr, r.stderr
    # systemd's own exposure score of the sandbox (0 = locked down, 10 = none): "OK" or better
    r = subprocess.run([analyze, "security", "--offline=true", "--no-pager",
                        unit_path], capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for xlserve\.service: ([0-9.]+)", r.stdout)
    assert m and float(m.group(1)) <= 2.0, r.stdout[-3000:] + r.stderr


def test_daemon_runs_under_memory_deny_write_execute(tmp_path, monkeypatch, start_daemon,
                                                     tiny_model):
    """MemoryDenyWriteExecute=yes: no mapping may become writable and executable, nor gain
    execute. PR_SET_MDWE (Linux 6.3) applies the same rule to a process: the daemon, OpenBLAS
    included, loads, serves and generates under it."""
    probe = subprocess.run(["/usr/bin/python3", "-c",
                            "import ctypes,sys; sys.exit(ctypes.CDLL(None).prctl(65, 1, 0, 0, 0))"])
    if probe.returncode != 0:
        pytest.skip("this kernel has no PR_SET_MDWE (Linux >= 6.3)")
    # the rule holds across exec, as the wrapper below relies on: a W+X mapping is refused
    wx = subprocess.run(["/usr/bin/python3", "-c",
                         "import ctypes, os, sys\n"
                         "assert ctypes.CDLL(None).prctl(65, 1, 0, 0, 0) == 0\n"
                         "os.execv(sys.executable, [sys.executable, '-c', 'import mmap; "
                         "mmap.mmap(-1, 4096, prot=7)'])"], capture_output=True, text=True)
    assert wx.returncode != 0 and "Permission denied" in wx.stderr, wx.stderr
    wrapper = tmp_path / "xlserve-mdwe"
    wrapper.write_text(
        "#!/usr/bin/python3\nimport ctypes, os, sys\n"
        "if ctypes.CDLL(None, use_errno=True).prctl(65, 1, 0, 0, 0): sys.exit('prctl failed')\n"
        "os.execv(%r, [%r] + sys.argv[1:])\n" % (X.xlserve_bin(), X.xlserve_bin()))
    wrapper.chmod(0o755)
    extra = store_args(tmp_path)
    monkeypatch.setenv("XLSERVE_BIN", str(wrapper))
    d = start_daemon(tiny_model, "--workers", "2", "--blas-threads", "2", *extra)
    with open("/proc/%d/status" % d.proc.pid) as f:
        assert "xlserve" in f.read().split("\n", 1)[0]
    st, _, body = X.post_json(d.port, "/v1/completions", {"prompt": "Hello", "max_tokens": 20},
                              {"X-Session-Id": "mdwe-1"})
    assert st == 200 and body["usage"]["completion_tokens"] == 20, body


def syscall_groups(analyze):
    """{"@group": [entries]} from `systemd-analyze syscall-filter`."""
    out = subprocess.run([analyze, "syscall-filter", "--no-pager"], capture_output=True,
                         text=True, timeout=60).stdout
    groups, cur = {}, None
    for line in out.splitlines():
        if line.startswith("@"):
            cur = groups.setdefault(line.strip(), [])
        elif cur is not None and line.strip() and not line.strip().startswith("#"):
            cur.append(line.strip())
        elif not line.strip():
            cur = None
    return groups


def expand(groups, name, seen=None):
    seen = set() if seen is None else seen
    out = set()
    for e in groups.get(name, []):
        if e.startswith("@"):
            if e not in seen:
                seen.add(e)
                out |= expand(groups, e, seen)
        else:
            out.add(e)
    return out


def test_every_syscall_and_socket_family_is_allowed_by_the_unit(tmp_path, monkeypatch,
                                                                start_daemon, tiny_model):
    analyze, strace = shutil.which("systemd-analyze"), shutil.which("strace")
    if not analyze or not strace:
        pytest.skip("needs systemd-analyze and strace (tools/install-deps.sh installs both)")
    if sanitized_build():
        pytest.skip("the filter is for the release binary (the sanitizer runtime makes its own "
                    "system calls)")
    if subprocess.run([strace, "-qq", "-o", "/dev/null", "/bin/true"]).returncode != 0:
        pytest.skip("strace cannot trace here (ptrace not permitted)")
    with open(os.path.join(ROOT, "systemd", "xlserve.service")) as f:
        s = unit_settings(f.read())
    groups = syscall_groups(analyze)
    allowed, denied = set(), set()
    for v in s["SystemCallFilter"]:
        deny = v.startswith("~")
        for e in v.lstrip("~").split():
            names = expand(groups, e) if e.startswith("@") else {e}
            (denied if deny else allowed).update(names)
    allowed -= denied
    families = set(s["RestrictAddressFamilies"][0].split())
    assert len(allowed) > 200

    trace = tmp_path / "strace.out"
    wrapper = tmp_path / "xlserve-strace"
    wrapper.write_text("#!/bin/sh\nexec %s -f -qq -o %s %s \"$@\"\n" % (strace, trace,
                                                                       X.xlserve_bin()))
    wrapper.chmod(0o755)
    extra = store_args(tmp_path)
    monkeypatch.setenv("XLSERVE_BIN", str(wrapper))
    ns = NotifySocket()
    key = tmp_path / "keys"
    key.write_text("k1\n")
    try:
        d = start_daemon(tiny_model, "--workers", "2", "--api-key-file", str(key),
                         "--max-tokens-limit", "10000000", *extra,
                         env={"NOTIFY_SOCKET": ns.address, "WATCHDOG_USEC": "200000"})
        auth = {"Authorization": "Bearer k1", "X-Session-Id": "strace-1"}
        st, _, body = X.post_json(d.port, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16}, auth)
        assert st == 200, body
        st, _, ev = X.stream(d.port, "/v1/completions", {"prompt": "x", "max_tokens": 16,
                                                         "stream": True}, auth)
        assert st == 200
        c = d.conn()  # a client that leaves mid-generation
        c.request("POST", "/v1/completions", body=json.dumps(
            {"prompt": "y", "max_tokens": 100000, "stream": True}),
            headers=dict(auth, **{"Content-Type": "application/json", "X-Session-Id": "s2"}))
        r = c.getresponse()
        assert r.status == 200 and r.read1(100)
        c.close()
        X.request(d.port, "GET", "/metrics")
        X.request(d.port, "POST", "/v1/sessions/strace-1/fork", headers=auth)
        children = open("/proc/%d/task/%d/children" % (d.proc.pid, d.proc.pid)).read().split()
        daemon_pid = int(children[0])
        os.kill(daemon_pid, signal.SIGHUP)  # systemctl reload
        d.wait_log(lambda o: o.get("event") == "sighup")  # handled before the stop
        os.kill(daemon_pid, signal.SIGTERM)  # systemctl stop
        assert d.proc.wait(30) == 0
        ns.wait_for(lambda m: "STOPPING=1" in m.split("\n"))
    finally:
        ns.close()
    used, fams = set(), set()
    with open(trace) as f:
        for line in f:
            m = re.match(r"\d+\s+(?:<\.\.\. )?([a-z0-9_]+)(?:\(| resumed>)", line)
            if m:
                used.add(m.group(1))
            m = re.match(r"\d+\s+socket\((AF_[A-Z0-9]+)", line)
            if m:
                fams.add(m.group(1))
    used.discard("execve")  # systemd always allows the exec of the service's own binary
    if os.geteuid() == 0:
        # SQLite gives a new journal/WAL file its database's owner only when it runs as root
        # (robustFchown); under the unit the daemon never does (DynamicUser)
        used.discard("fchown")
    assert {"epoll_wait", "sendto", "mmap"} <= used, sorted(used)
    assert used - allowed == set(), "system calls the unit's SystemCallFilter denies"
    assert fams and fams <= families, fams

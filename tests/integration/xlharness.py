"""xlharness.py: helpers for the integration tests: a tiny random byte-level model, the real
daemon on a loopback port (started, waited for, stopped), HTTP/JSON and SSE clients on
http.client. Every wait is a bounded loop on a condition with a deadline.
"""
import functools
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import numpy as np

from xlmodel import model_dir

TINY = dict(vocab_size=256, cutoffs=[], d_model=32, d_embed=32, n_head=4, d_head=8, d_inner=64,
            div_val=1, pre_lnorm=False, n_layer=2, mem_len=64, tgt_len=16, clamp_len=-1,
            same_length=True, untie_r=True, tie_word_embeddings=True,
            layer_norm_epsilon=1e-5, xlserve_tokenizer="bytes")


def write_tiny_model(out_dir, seed=7, **overrides):
    cfg = dict(TINY, **overrides)
    rng = np.random.default_rng(seed)
    V, d, H, D, di = cfg["vocab_size"], cfg["d_model"], cfg["n_head"], cfg["d_head"], cfg["d_inner"]

    def w(*shape, s=0.3):
        return (rng.standard_normal(shape) * s).astype(np.float32)

    bias = w(V, s=0.5)
    bias[32] += 4.0          # favour spaces and lower-case ASCII so replies are readable UTF-8
    bias[97:123] += 4.0
    t = {"transformer.word_emb.emb_layers.0.weight": w(V, d, s=0.35),
         "crit.out_layers.0.bias": bias}
    for n in range(cfg["n_layer"]):
        p = f"transformer.layers.{n}."
        t[p + "dec_attn.qkv_net.weight"] = w(3 * H * D, d)
        t[p + "dec_attn.o_net.weight"] = w(d, H * D)
        t[p + "dec_attn.r_net.weight"] = w(H * D, d)
        t[p + "dec_attn.layer_norm.weight"] = (1 + w(d, s=0.1)).astype(np.float32)
        t[p + "dec_attn.layer_norm.bias"] = w(d, s=0.1)
        t[p + "dec_attn.r_w_bias"] = w(H, D, s=0.1)
        t[p + "dec_attn.r_r_bias"] = w(H, D, s=0.1)
        t[p + "pos_ff.CoreNet.0.weight"] = w(di, d)
        t[p + "pos_ff.CoreNet.0.bias"] = w(di, s=0.1)
        t[p + "pos_ff.CoreNet.3.weight"] = w(d, di)
        t[p + "pos_ff.CoreNet.3.bias"] = w(d, s=0.1)
        t[p + "pos_ff.layer_norm.weight"] = (1 + w(d, s=0.1)).astype(np.float32)
        t[p + "pos_ff.layer_norm.bias"] = w(d, s=0.1)
    model_dir.write_model_dir(str(out_dir), cfg, t)
    return str(out_dir)


@functools.lru_cache(maxsize=None)
def binary_sanitizer(binary=None):
    """"tsan", "asan" (ASan + UBSan) or "" for the daemon under test (or BINARY)."""
    with open(binary or xlserve_bin(), "rb") as f:
        data = f.read()
    return "tsan" if b"__tsan_init" in data else "asan" if b"__asan_init" in data else ""


def xlserve_bin():
    b = os.environ.get("XLSERVE_BIN")
    if not b:
        root = os.environ.get("XL_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
        b = os.path.join(root, "build", "xlserve")
    return b


# The first line of a sanitizer's report on stderr (ASan, LSan, UBSan's `runtime error`, TSan).
SANITIZER_LINE = re.compile(r"runtime error:|ERROR: (Address|Leak)Sanitizer|"
                            r"WARNING: ThreadSanitizer|ThreadSanitizer: reported")


def sanitizer_report(lines, limit=120):
    """The sanitizer reports among a daemon's stderr LINES (parsed log lines; a report's lines
    are not JSON): from the first report's first line, up to LIMIT lines; "" when none."""
    raw = [l["raw"] for l in lines if "raw" in l]
    for i, text in enumerate(raw):
        if SANITIZER_LINE.search(text):
            start = i - 1 if i and raw[i - 1].startswith("====") else i
            return "\n".join(raw[start:start + limit])
    return ""


class Daemon:
    """The real `xlserve serve` on 127.0.0.1 with an ephemeral port; its JSON log lines are
    collected from stderr. Every daemon started is in Daemon.started (the sanitizer check of
    xlfixtures.no_sanitizer_report reads their logs after each test)."""

    started = []

    def __init__(self, model, args=(), env=None, wait_ready=True, timeout=30, port=None,
                 prefix="", wrapper=()):
        """port: a fixed port (for daemons whose log does not go to stderr); default: any.
        wrapper: a command prefix, e.g. a valgrind invocation."""
        self.lines = []
        self.cv = threading.Condition()
        e = dict(os.environ)
        e.update(env or {})
        cmd = [*wrapper, xlserve_bin(), "serve", "--model", model, "--host", "127.0.0.1",
               "--port", str(port or 0), *args]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=e)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        Daemon.started.append(self)
        self.port = port
        self.prefix = prefix
        try:
            if not port:
                ev = self.wait_log(lambda o: o.get("event") == "listening", timeout)
                self.port = ev["port"]
            if wait_ready:
                self.wait_ready(timeout)
        except BaseException:
            self.proc.kill()  # never leave a daemon behind
            self.proc.wait()
            raise

    def _read(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            try:
                obj = json.loads(line)
            except ValueError:
                obj = {"raw": line}
            with self.cv:
                self.lines.append(obj)
                self.cv.notify_all()
        with self.cv:
            self.cv.notify_all()

    def wait_log(self, pred, timeout=20):
        deadline = time.monotonic() + timeout
        with self.cv:
            i = 0
            while True:
                while i < len(self.lines):
                    if pred(self.lines[i]):
                        return self.lines[i]
                    i += 1
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("log line not seen; log so far:\n" +
                                         "\n".join(json.dumps(l) for l in self.lines[-30:]))
                if self.proc.poll() is not None and not self.reader.is_alive():
                    raise AssertionError("daemon exited %s; log:\n%s" % (
                        self.proc.returncode, "\n".join(json.dumps(l) for l in self.lines[-30:]) +
                        ("\n--- sanitizer report:\n" + sanitizer_report(self.lines)
                         if sanitizer_report(self.lines) else "")))
                self.cv.wait(min(left, 0.5))

    def requests_logged(self):
        with self.cv:
            return [l for l in self.lines if l.get("event") == "request"]

    def wait_ready(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                st, _, _ = request(self.port, "GET", self.prefix + "/health")
                if st == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                self.reader.join(timeout=5)
                raise AssertionError("daemon exited %s; log:\n%s" % (self.proc.returncode,
                                                                     self.tail()))
            time.sleep(0.05)
        raise AssertionError("daemon not ready in %ss" % timeout)

    def conn(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def tail(self, n=30):
        """The last N log lines, and the sanitizer report when there is one (a report is longer
        than a tail and its first line, the one that names the error, would be cut)."""
        with self.cv:
            text = "\n".join(json.dumps(l) for l in self.lines[-n:])
            report = sanitizer_report(self.lines)
        if report:
            text += "\n--- sanitizer report on the daemon's stderr:\n" + report
        return text

    def sanitizer_report(self):
        with self.cv:
            return sanitizer_report(self.lines)

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout=30):
        return self.proc.wait(timeout=timeout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(timeout=5)
        return self.proc.returncode


def request(port, method, path, body=None, headers=None, timeout=60):
    """One request; returns (status, headers dict (lower-case), body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = dict(headers or {})
    data = None
    if body is not None:
        data = body if isinstance(body, (bytes, bytearray)) else json.dumps(body).encode()
        h.setdefault("Content-Type", "application/json")
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    payload = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hdrs, payload


def post_json(port, path, body, headers=None, timeout=60):
    st, h, b = request(port, "POST", path, body, headers, timeout)
    return st, h, (json.loads(b) if b else None)


def complete(port, sid=None, headers=None, timeout=60, **body):
    """A /v1/completions request (in session SID when given) that must answer 200; its JSON."""
    h = dict(headers or {})
    if sid:
        h["X-Session-Id"] = sid
    st, _, b = post_json(port, "/v1/completions", body, headers=h, timeout=timeout)
    assert st == 200, b
    return b


def get_session(port, sid, headers=None, prefix=""):
    """GET /v1/sessions/SID: (status, JSON body)."""
    st, _, b = request(port, "GET", prefix + "/v1/sessions/" + sid, headers=headers)
    return st, json.loads(b)


def ids_of(tokens):
    """Byte-model token ids from completions logprobs token strings."""
    out = []
    for t in tokens:
        if t.startswith("bytes:"):
            out += [int(h, 16) for h in t[6:].split("\\x")[1:]]
        else:
            b = t.encode()
            assert len(b) == 1, t
            out.append(b[0])
    return out


def lps(b):
    """The token log-probs of a completion (requested with logprobs)."""
    return b["choices"][0]["logprobs"]["token_logprobs"]


def metrics(port, prefix=""):
    """GET /metrics: {sample name with its labels: value}, e.g.
    {'xlserve_requests_total{route="ui",status="200"}': 2.0, ...}."""
    st, _, b = request(port, "GET", prefix + "/metrics")
    assert st == 200, b[:500]
    out = {}
    for line in b.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def metric(port, name):
    """One sample of /metrics (name with its labels, if any)."""
    m = metrics(port)
    assert name in m, "%s not in /metrics" % name
    return m[name]


def rss_kb(pid):
    """The resident set size of process PID (kB, /proc/PID/status VmRSS)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for pid %d" % pid)


def cpu_seconds(pid, tid=None):
    """CPU seconds (user + system) of process PID, or of its thread TID."""
    path = "/proc/%d/task/%d/stat" % (pid, tid) if tid else "/proc/%d/stat" % pid
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_sse(resp, on_event=None, deadline_s=60):
    """Reads an SSE response to the end; returns [(arrival_time, data_str)] (comments as
    (t, ':ping')). on_event(data) may return False to stop reading early."""
    events = []
    buf = b""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            t = time.monotonic()
            for line in ev.split(b"\n"):
                if line.startswith(b"data: "):
                    data = line[6:].decode("utf-8")
                    events.append((t, data))
                    if on_event and on_event(data) is False:
                        return events
                elif line.startswith(b":"):
                    events.append((t, ":" + line[1:].decode().strip()))
    return events


def timed_reads(resp, t0=None):
    """Reads an SSE response as it arrives, up to its `data: [DONE]` event or its end; returns
    ([(seconds since t0, bytes in that read)], all bytes). t0: time.monotonic() (default: now)."""
    t0 = time.monotonic() if t0 is None else t0
    reads, buf = [], b""
    while not buf.endswith(b"data: [DONE]\n\n"):
        chunk = resp.read1(65536)
        if not chunk:
            break
        reads.append((time.monotonic() - t0, len(chunk)))
        buf += chunk
    return reads, buf


def stream(port, path, body, headers=None, timeout=60):
    """POSTs a streaming request and reads it to the end; returns (status, headers, events),
    or (status, headers, body bytes) when the status is not 200."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json", **(headers or {})}
    c.request("POST", path, body=json.dumps(body).encode(), headers=h)
    r = c.getresponse()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    if r.status != 200:
        body = r.read()
        c.close()
        return r.status, hdrs, body
    ev = read_sse(r, deadline_s=timeout)
    c.close()
    return r.status, hdrs, ev


def sse_json(events):
    """The JSON payloads of data events (without [DONE] and comments)."""
    return [json.loads(d) for _, d in events if not d.startswith(":") and d != "[DONE]"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_until(pred, timeout=60, what="condition"):
    """Polls pred() until it returns something true (returned) or timeout seconds pass
    (AssertionError naming what was awaited). The default bound is generous: the suites run
    on busy machines too (tools/test.sh's loaded stage)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


def npm_clients(tmp_path_factory, purpose):
    """node and a directory holding tests/clients (package.json, the lock file, the .mjs
    scripts) with its pinned packages installed: `npm ci` once per lock file, shared by every
    suite that drives node (the directory is keyed on the lock file's hash). Skips, naming
    PURPOSE, when node or npm is missing, unless XL_REQUIRE_NODE=1 (then fails)."""
    import fcntl
    import hashlib
    import shutil

    import pytest

    def need(tool):
        path = shutil.which(tool)
        if path:
            return path
        if os.environ.get("XL_REQUIRE_NODE") == "1":
            pytest.fail(f"{tool} is not installed and XL_REQUIRE_NODE=1")
        pytest.skip(f"{tool} is not installed (node 18 or later + npm run {purpose})")

    node, npm = need("node"), need("npm")
    clients = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients")
    build = os.environ.get("XL_BUILD_DIR") or str(tmp_path_factory.mktemp("npm"))
    dest = os.path.join(build, "npm-clients")
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(clients, "package-lock.json"), "rb") as f:
        stamp = hashlib.sha256(f.read()).hexdigest()
    stamp_file = os.path.join(dest, ".installed")
    # pytest-xdist runs suites in several processes: one copy and `npm ci` at a time, the
    # others wait for it and find the stamp written
    with open(os.path.join(build, "npm-clients.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name in os.listdir(clients):
            if name in ("package.json", "package-lock.json") or name.endswith(".mjs"):
                shutil.copyfile(os.path.join(clients, name), os.path.join(dest, name))
        if not (os.path.exists(stamp_file) and open(stamp_file).read() == stamp):
            r = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=dest,
                               capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, "npm ci failed:\n" + r.stdout[-3000:] + r.stderr[-3000:]
            with open(stamp_file, "w") as f:
                f.write(stamp)
    return node, dest

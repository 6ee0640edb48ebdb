"""cdp.py: headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe:
JSON messages separated by NUL bytes on the browser's fds 3 (commands in) and 4 (replies out)),
with the standard library only: no webdriver, no websocket client. Enough for the web suite:
isolated browser contexts (fresh localStorage), navigation, evaluating JavaScript, console and
exception capture, screenshots. Every wait has a deadline.
"""
import base64
import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time


def chromium_binary():
    """The Chromium to use: $XL_CHROMIUM, else Debian's `chromium` on PATH (None if absent)."""
    b = os.environ.get("XL_CHROMIUM")
    if b:
        return b
    for name in ("chromium", "chromium-browser"):
        p = shutil.which(name)
        if p:
            return p
    return None


class CDPError(Exception):
    pass


class Browser:
    """One headless Chromium process. Use `page()` for a tab in its own browser context."""

    def __init__(self):
        self.binary = chromium_binary()
        if not self.binary:
            raise CDPError("chromium not found (apt-get install chromium)")
        self.profile = tempfile.mkdtemp(prefix="xl-chromium-")
        cmd_r, cmd_w = os.pipe()   # we write commands, the browser reads fd 3
        out_r, out_w = os.pipe()   # the browser writes fd 4, we read
        # above 9 first, so that placing them at 3 and 4 in the child cannot clobber one another
        hi_r, hi_w = fcntl.fcntl(cmd_r, fcntl.F_DUPFD_CLOEXEC, 10), fcntl.fcntl(out_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(cmd_r)
        os.close(out_w)
        cmd_r, out_w = hi_r, hi_w
        self._stderr = tempfile.TemporaryFile()

        def child_fds():  # runs in the child before the other fds are closed
            os.dup2(cmd_r, 3)
            os.dup2(out_w, 4)

        args = [self.binary, "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--disable-features=Translate,MediaRouter",
                "--remote-debugging-pipe", "--user-data-dir=" + self.profile, "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self._stderr, preexec_fn=child_fds, pass_fds=(3, 4),
                                     start_new_session=True)
        os.close(cmd_r)
        os.close(out_w)
        self._w = os.fdopen(cmd_w, "wb", buffering=0)
        self._r = os.fdopen(out_r, "rb", buffering=0)
        self._id = 0
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._replies = {}
        self.events = []          # (sessionId, method, params), in arrival order
        self._closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self.version = self.call("Browser.getVersion")
        except BaseException:
            self.close()
            raise

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = self._r.read(65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw.decode("utf-8"))
                with self._cv:
                    if "id" in msg:
                        self._replies[msg["id"]] = msg
                    else:
                        self.events.append((msg.get("sessionId"), msg.get("method"),
                                            msg.get("params", {})))
                    self._cv.notify_all()
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def stderr_tail(self, n=4000):
        try:
            self._stderr.seek(0)
            return self._stderr.read().decode("utf-8", "replace")[-n:]
        except (OSError, ValueError):
            return ""

    def call(self, method, params=None, session=None, timeout=30):
        with self._cv:
            self._id += 1
            mid = self._id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self._w.write(json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._cv:
            while mid not in self._replies:
                left = deadline - time.monotonic()
                if self._closed:
                    raise CDPError("browser exited during %s; stderr:\n%s" %
                                   (method, self.stderr_tail()))
                if left <= 0:
                    raise CDPError("no reply to %s in %ss" % (method, timeout))
                self._cv.wait(min(left, 0.5))
            rep = self._replies.pop(mid)
        if "error" in rep:
            raise CDPError("%s: %s" % (method, rep["error"]))
        return rep.get("result", {})

    def page(self, width=1000, height=800, mobile=False):
        """A new tab in a fresh browser context (its own localStorage)."""
        ctx = self.call("Target.createBrowserContext")["browserContextId"]
        tid = self.call("Target.createTarget", {"url": "about:blank",
                                                "browserContextId": ctx})["targetId"]
        sid = self.call("Target.attachToTarget", {"targetId": tid, "flatten": True})["sessionId"]
        p = Page(self, sid, tid, ctx)
        for m in ("Page.enable", "Runtime.enable", "Log.enable"):
            p.call(m)
        p.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                      "deviceScaleFactor": 1, "mobile": mobile})
        return p

    def close(self):
        if self.proc.poll() is None:
            try:
                self.call("Browser.close", timeout=5)
            except (CDPError, OSError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)  # the wrapper script's group
                except ProcessLookupError:
                    pass
                self.proc.wait()
        for f in (self._w, self._r):
            try:
                f.close()
            except OSError:
                pass
        self._reader.join(timeout=5)
        self._stderr.close()
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    def __init__(self, browser, session, target, context):
        self.b, self.session, self.target, self.context = browser, session, target, context

    def call(self, method, params=None, timeout=30):
        return self.b.call(method, params, session=self.session, timeout=timeout)

    def navigate(self, url, timeout=30):
        r = self.call("Page.navigate", {"url": url}, timeout=timeout)
        if r.get("errorText"):
            raise CDPError("navigate %s: %s" % (url, r["errorText"]))
        self.wait_for("document.readyState === 'complete'", timeout)

    def eval(self, expr, timeout=30):
        """Evaluates expr (awaiting a promise) and returns its value (JSON-able)."""
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                           "awaitPromise": True}, timeout=timeout)
        if "exceptionDetails" in r:
            raise CDPError("evaluate %r: %s" % (expr[:80], json.dumps(r["exceptionDetails"])[:2000]))
        return r["result"].get("value")

    def wait_for(self, expr, timeout=30):
        """Polls expr until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            v = self.eval(expr)
            if v:
                return v
            if time.monotonic() > deadline:
                raise CDPError("timed out waiting for %s; problems: %s" % (expr, self.problems()))
            time.sleep(0.05)

    def problems(self):
        """Console errors, uncaught exceptions and CSP/security reports seen by this tab."""
        out = []
        with self.b._cv:
            evs = [e for e in self.b.events if e[0] == self.session]
        for _, m, p in evs:
            if m == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:500])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console.%s: %s" % (p["type"], json.dumps(p.get("args"))[:500]))
            elif m == "Log.entryAdded":
                e = p.get("entry", {})
                if e.get("level") == "error" or e.get("source") == "security":
                    out.append("log[%s/%s]: %s %s" % (e.get("source"), e.get("level"),
                                                      e.get("text"), e.get("url", "")))
        return out

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.b.call("Target.closeTarget", {"targetId": self.target})
            self.b.call("Target.disposeBrowserContext", {"browserContextId": self.context})
        except CDPError:
            pass

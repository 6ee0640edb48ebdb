"""Overload and slow clients, over raw sockets on loopback: after any episode at the connection
limit the daemon accepts again within a second of capacity returning; a connection that does not
send its request head in time is closed (header_timeout), and one client address cannot hold
more than max_connections_per_client connections, so a few cheap sockets cannot lock others out.

Clients that must look like different hosts bind to other loopback addresses (127.0.0.2 ...:
the whole of 127/8 reaches the daemon listening on 127.0.0.1). Each test prints its figures
(run pytest with -s to see them)."""
import os
import select
import signal
import socket
import time

import pytest

import xlharness as X

HEALTH = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
ATTACKER = "127.0.0.2"


def open_sockets(pid):
    """Sockets the daemon holds (its listener, accepted connections, a few internal ones)."""
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("socket:"):
                n += 1
        except OSError:
            pass
    return n


def connect(port, source=None, timeout=5):
    return socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                    source_address=(source, 0) if source else None)


def status_of(data):
    """The status code of the HTTP response at the start of data, or None."""
    if not data.startswith(b"HTTP/1.1 "):
        return None
    return int(data[9:12])


def read_responses(socks, deadline):
    """Reads from each socket until its response's first line arrived, the peer closed or the
    deadline passed. Returns {sock: (status or None, seconds from now until known)}."""
    t0 = time.monotonic()
    got = {s: b"" for s in socks}
    done = {}
    while len(done) < len(socks):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([s for s in socks if s not in done], [], [], left)
        for s in ready:
            try:
                chunk = s.recv(4096)
            except OSError:
                chunk = b""
            got[s] += chunk
            if not chunk or b"\r\n" in got[s]:
                done[s] = (status_of(got[s]), time.monotonic() - t0)
    return done


def close_waits(port):
    """The daemon's sockets on port whose peer closed (TCP state CLOSE_WAIT: the FIN arrived,
    the daemon has not closed its end yet), from /proc/net/tcp and tcp6."""
    n = 0
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == "08":
                n += 1
    return n


def send_health(port, source=None, close=False):
    """close: the request asks the daemon to close the connection after its answer."""
    s = connect(port, source)
    s.sendall(HEALTH.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n") if close else HEALTH)
    return s


def quiet_loop(d):
    """The daemon runs a 1 s request sweep for a second after any request; wait it out so an
    overload episode is not rescued by that unrelated timer (the stall the first test guards
    against only showed when nothing else woke the loop)."""
    time.sleep(1.5)


def hold_the_limit(d, port, n):
    """n connections that each sent one byte of a request line; returns them once the daemon
    accepted them all."""
    base = open_sockets(d.proc.pid)
    held = [connect(port) for _ in range(n)]
    for s in held:
        s.sendall(b"G")
    X.wait_until(lambda: open_sockets(d.proc.pid) >= base + n, what="%d accepted connections" % n)
    return held


def test_accepts_again_after_the_limit_was_held(start_daemon, tiny_model):
    """16 connections hold max_connections 16 while 5 clients queue; all 16 then close while the
    daemon is busy (stopped), so it handles every close in one pass. The queued clients and new
    ones must be answered at once: before the fix the listener stayed out of MHD's epoll set for
    good and nothing was ever accepted again."""
    d = start_daemon(tiny_model, "--max-connections", "16", "--request-timeout", "4",
                     "--idle-timeout", "6", "--header-timeout", "600",
                     "--max-connections-per-client", "0")
    quiet_loop(d)
    held = hold_the_limit(d, d.port, 16)
    queued = [send_health(d.port) for _ in range(5)]
    during = read_responses(queued, time.monotonic() + 1.0)
    assert during == {}, "nothing can be answered while the limit is held"
    d.signal(signal.SIGSTOP)
    try:
        for s in held:
            s.close()
        # the FINs reach the stopped daemon's sockets
        X.wait_until(lambda: close_waits(d.port) >= 16, what="16 connections in CLOSE_WAIT")
    finally:
        d.signal(signal.SIGCONT)
    t0 = time.monotonic()
    after = read_responses(queued, t0 + 10)
    t_new0 = time.monotonic()
    st, _, _ = X.request(d.port, "GET", "/health", timeout=10)
    t_new = time.monotonic() - t_new0
    answered = sorted(v[1] for v in after.values() if v[0] == 200)
    print("\nlimit held by 16, 5 queued: answered during 0/5, after %d/5 (last after %.3f s); "
          "a new client answered in %.3f s" % (len(answered), answered[-1] if answered else -1,
                                               t_new))
    for s in queued:
        s.close()
    assert len(answered) == 5, after
    # once the limit frees, waiting clients are answered within a second (the stall this
    # catches lasted until an unrelated timeout); the margin is for a loaded test machine
    assert answered[-1] < AT_ONCE_S and st == 200 and t_new < AT_ONCE_S


def test_accepts_again_after_server_side_timeouts_at_the_limit(start_daemon, tiny_model):
    """The same episode ended by the daemon's own idle timeout: 16 idle connections at the limit
    time out together (the daemon is stopped across their deadline, so one pass closes them
    all), while clients queue."""
    d = start_daemon(tiny_model, "--max-connections", "16", "--idle-timeout", "2",
                     "--header-timeout", "600", "--max-connections-per-client", "0")
    quiet_loop(d)
    base = open_sockets(d.proc.pid)
    held = [connect(d.port) for _ in range(16)]
    X.wait_until(lambda: open_sockets(d.proc.pid) >= base + 16, what="16 accepted connections")
    queued = [send_health(d.port) for _ in range(5)]
    d.signal(signal.SIGSTOP)
    try:
        time.sleep(2.5)  # past every idle deadline while the daemon cannot run
    finally:
        d.signal(signal.SIGCONT)
    t0 = time.monotonic()
    after = read_responses(queued, t0 + 10)
    answered = sorted(v[1] for v in after.values() if v[0] == 200)
    print("\n16 idle at the limit timed out together, 5 queued: answered after %d/5 (last after "
          "%.3f s)" % (len(answered), answered[-1] if answered else -1))
    for s in held + queued:
        s.close()
    assert len(answered) == 5, after
    assert answered[-1] < 2.0 + 2.0  # the idle timeout is measured from the last byte: + margin
    st, _, _ = X.request(d.port, "GET", "/health", timeout=10)
    assert st == 200


class Dripper:
    """n sockets from one address that each send one byte of a request line per `every`
    seconds; a socket the daemon closes is replaced at once (a persistent attacker). Records how
    long each socket lived."""

    def __init__(self, port, n, source, every):
        self.port, self.n, self.source, self.every = port, n, source, every
        self.socks = {}
        self.last_sent = {}
        self.last_open = 0.0
        self.lifetimes = []
        self.refused = 0

    def _open(self):
        try:
            s = connect(self.port, self.source, timeout=1)
        except OSError:
            self.refused += 1
            return
        s.setblocking(False)
        self.socks[s] = time.monotonic()
        self.last_sent[s] = 0.0

    def step(self):
        if time.monotonic() - self.last_open >= 0.1:  # replace closed sockets 10 times a second
            self.last_open = time.monotonic()
            while len(self.socks) < self.n:
                self._open()
        for s, t in list(self.socks.items()):
            closed = False
            try:
                if s.recv(4096, socket.MSG_DONTWAIT) == b"":
                    closed = True
            except BlockingIOError:
                pass
            except OSError:
                closed = True
            if not closed and time.monotonic() - self.last_sent[s] >= self.every:
                try:
                    s.send(b"G")
                    self.last_sent[s] = time.monotonic()
                except OSError:
                    closed = True
            if closed:
                self.lifetimes.append(time.monotonic() - t)
                del self.socks[s]
                del self.last_sent[s]
                s.close()

    def stop(self):
        now = time.monotonic()
        for s, t in self.socks.items():
            self.lifetimes.append(now - t)
            s.close()
        self.socks = {}


class Legit:
    """n clients that each ask GET /health, give up after `patience` seconds and ask again
    `gap` seconds after an answer or giving up."""

    def __init__(self, port, n, patience, gap=0.25, source="127.0.0.1"):
        self.port, self.patience, self.gap, self.source = port, patience, gap, source
        self.next_at = [0.0] * n
        self.pending = {}
        self.n = n
        self.tried = self.answered = 0
        self.waits = []

    def step(self):
        now = time.monotonic()
        while len(self.pending) < self.n and min(self.next_at) <= now:
            self.next_at.remove(min(self.next_at))
            s = socket.socket()
            s.setblocking(False)
            s.bind((self.source, 0))
            s.connect_ex(("127.0.0.1", self.port))
            self.pending[s] = [time.monotonic(), b"", False]
            self.tried += 1
        if not self.pending:
            time.sleep(0.02)
            return
        r, w, _ = select.select(list(self.pending), [s for s, v in self.pending.items()
                                                      if not v[2]], [], 0.02)
        now = time.monotonic()
        for s in w:
            try:
                s.send(HEALTH)
                self.pending[s][2] = True
            except OSError:
                pass
        for s in r:
            try:
                chunk = s.recv(4096)
            except OSError:
                chunk = b""
            self.pending[s][1] += chunk
            if status_of(self.pending[s][1]) == 200:
                self.answered += 1
                self.waits.append(now - self.pending[s][0])
                self._drop(s)
            elif not chunk:
                self._drop(s)
        for s, v in list(self.pending.items()):
            if now - v[0] > self.patience:
                self._drop(s)

    def _drop(self, s):
        del self.pending[s]
        s.close()
        self.next_at.append(time.monotonic() + self.gap)

    def stop(self):
        for s in list(self.pending):
            self._drop(s)


def run_attack(port, dripper, legit, seconds):
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        dripper.step()
        legit.step()
    dripper.stop()
    legit.stop()


# "At once" for a client after the limit frees: well under a second on an idle machine, up to
# 2.4 s seen with other suites running beside this one; a stalled accept waits for the next
# idle or request timeout (10 s or more here)
AT_ONCE_S = 5.0


def first_answer_after(port, timeout=10):
    t0 = time.monotonic()
    st, _, _ = X.request(port, "GET", "/health", timeout=timeout)
    return st, time.monotonic() - t0


def test_slowloris_at_the_limit_is_cut_at_the_head_deadline(start_daemon, tiny_model):
    """The issue's shape: 16 sockets drip a request line into max_connections 16 while 5
    clients keep asking /health (each gives up after 3 s). Without a head deadline they held the
    daemon for as long as they dripped; now each lives about header_timeout (2 s here), and the
    clients get in between."""
    d = start_daemon(tiny_model, "--max-connections", "16", "--request-timeout", "4",
                     "--idle-timeout", "6", "--header-timeout", "2",
                     "--max-connections-per-client", "0")
    drip = Dripper(d.port, 16, ATTACKER, every=0.5)
    legit = Legit(d.port, 5, patience=3.0)
    run_attack(d.port, drip, legit, seconds=10)
    st, t_after = first_answer_after(d.port)
    longest = max(drip.lifetimes)
    print("\nslowloris 16 x 1 byte/0.5 s for 10 s at max_connections 16, header_timeout 2: "
          "legit answered %d/%d during (median wait %.2f s), after in %.3f s; attacker sockets "
          "%d, longest lived %.2f s" % (
              legit.answered, legit.tried,
              sorted(legit.waits)[len(legit.waits) // 2] if legit.waits else -1, t_after,
              len(drip.lifetimes), longest))
    assert st == 200 and t_after < 2.0
    assert longest < 2 + 1.5, drip.lifetimes  # cut near header_timeout, not at the attack's end
    assert legit.answered >= 1  # the clients get in whenever the attacker's sockets are cut
    assert X.metric(d.port, "xlserve_connections_head_timeout_total") >= 16


def test_per_client_limit_keeps_others_served(start_daemon, tiny_model):
    """One address (127.0.0.2) tries to hold all 16 connections: it gets 8
    (max_connections_per_client), the rest are closed at accept, and everyone else is served
    during the attack without waiting for the head deadline."""
    d = start_daemon(tiny_model, "--max-connections", "16", "--header-timeout", "30",
                     "--max-connections-per-client", "8")
    drip = Dripper(d.port, 16, ATTACKER, every=0.5)
    legit = Legit(d.port, 5, patience=3.0)
    run_attack(d.port, drip, legit, seconds=6)
    st, t_after = first_answer_after(d.port)
    long_lived = sum(1 for t in drip.lifetimes if t > 5)
    waits = sorted(legit.waits)
    print("\nper-client limit 8 of 16, one address dripping into 16 sockets for 6 s: legit "
          "answered %d/%d during (median wait %.3f s, max %.3f s), after in %.3f s; attacker "
          "connections cut at accept %d, held %d" % (
              legit.answered, legit.tried, waits[len(waits) // 2] if waits else -1,
              waits[-1] if waits else -1, t_after, len(drip.lifetimes) - long_lived, long_lived))
    assert long_lived <= 8
    assert legit.answered >= 0.9 * legit.tried - 5 and legit.answered >= 10
    assert st == 200 and t_after < 2.0
    assert X.metric(d.port, "xlserve_connections_refused_per_client_total") >= 1


@pytest.mark.parametrize("proxy_addr", ["127.0.0.3", "127.0.0.1"])
def test_per_client_limit_exempts_trusted_proxies(start_daemon, tiny_model, proxy_addr):
    """Behind a proxy every client is the proxy: its address (trusted_proxies; this host's
    127.0.0.1 always) has no limit, while another address is held to
    max_connections_per_client."""
    extra = ["--trusted-proxies", proxy_addr] if proxy_addr != "127.0.0.1" else []
    d = start_daemon(tiny_model, "--max-connections-per-client", "2", *extra)
    proxy = [connect(d.port, proxy_addr) for _ in range(5)]
    for s in proxy:
        s.sendall(HEALTH)
    got = read_responses(proxy, time.monotonic() + 10)
    assert sorted(v[0] for v in got.values()) == [200] * 5
    other = [connect(d.port, ATTACKER) for _ in range(3)]
    for s in other:
        try:
            s.sendall(HEALTH)
        except OSError:
            pass
    got = read_responses(other, time.monotonic() + 10)
    assert sorted((v[0] or 0) for v in got.values()) == [0, 200, 200], got
    for s in proxy + other:
        s.close()


def test_kept_alive_connection_gets_idle_plus_header_timeout(start_daemon, tiny_model):
    """After a response a kept-alive connection may wait idle_timeout for its next request, and
    then has header_timeout more to finish its head: dripping it byte by byte does not keep the
    connection for ever (the idle timer alone restarts with every byte)."""
    d = start_daemon(tiny_model, "--idle-timeout", "2", "--header-timeout", "2")
    s = connect(d.port, timeout=10)
    s.sendall(HEALTH)
    data = b""
    while b"\r\n\r\n" not in data or not data.endswith(b"}"):
        data += s.recv(4096)
    t0 = time.monotonic()
    line = b"GET /health HTTP/1.1\r\nX-Pad: " + b"a" * 200
    closed_after = None
    for ch in line:
        try:
            s.send(bytes([ch]))
        except OSError:
            closed_after = time.monotonic() - t0
            break
        r, _, _ = select.select([s], [], [], 0.25)
        if r:
            try:
                if s.recv(4096) == b"":
                    closed_after = time.monotonic() - t0
                    break
            except OSError:
                closed_after = time.monotonic() - t0
                break
    s.close()
    print("\nkept-alive connection dripping its second head: closed after %s s" % closed_after)
    assert closed_after is not None and 3.5 < closed_after < 4 + 1.5


def test_flood_then_accepts_at_once(start_daemon, tiny_model):
    """200 clients arrive at once at max_connections 16 (each asks for Connection: close, else
    the first 16 answered would keep their slots as idle keep-alive connections): every one that
    waits is answered, the half that give up (close while still queued) cost nothing, and
    afterwards a new client is answered at once."""
    d = start_daemon(tiny_model, "--max-connections", "16")
    quiet_loop(d)
    hold = hold_the_limit(d, d.port, 16)  # the flood lands on a full daemon
    waiting = [send_health(d.port, close=True) for _ in range(100)]
    leaving = [send_health(d.port, close=True) for _ in range(100)]
    for s in leaving:
        s.close()
    t0 = time.monotonic()
    for s in hold:
        s.close()
    got = read_responses(waiting, t0 + 20)
    answered = sorted(v[1] for v in got.values() if v[0] == 200)
    st, t_after = first_answer_after(d.port)
    print("\nflood of 200 on a full daemon (max_connections 16), 100 gave up: answered %d/100 "
          "(last after %.3f s), then a new client in %.3f s" % (
              len(answered), answered[-1] if answered else -1, t_after))
    for s in waiting:
        s.close()
    assert len(answered) == 100 and st == 200 and t_after < AT_ONCE_S

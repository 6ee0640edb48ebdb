"""Several replicas sharing one Redis session store (store = redis), behind nginx with the
SHIPPED config/nginx/xlserve-replicas.conf (only its listen port and its three server addresses
replaced). Everything on loopback: redis-server (AOF, appendfsync always) in a temp dir, three
daemons and nginx, all started and stopped here.
- A conversation through nginx sticks to one replica; kill -9 that replica: the next turn
  (through nginx) is served by another and equals, greedy, a stateless replay of the whole
  transcript; the killed replica, restarted, serves the current version, and a replica whose RAM
  copy another replica advanced reloads it instead of serving it.
- Two replicas given the same session at once: per version exactly one turn is acknowledged, the
  other is refused (409 session_conflict, or in-band in a stream) and not kept; the stored
  history is one linear transcript.
- Redis stopped: requests that need the store get 503 store_unavailable with Retry-After (also
  through nginx), stateless ones are served, /health says degraded; Redis back: the replicas
  reconnect by themselves and the session continues."""
import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

import deployharness as N
import xlharness as X
from redisserver import REDIS, RedisServer

SHIPPED_REPLICAS = os.path.join(N.ROOT, "config", "nginx", "xlserve-replicas.conf")

pytestmark = [
    pytest.mark.skipif(REDIS is None, reason="redis-server is not installed "
                       "(tools/install-deps.sh test installs it)"),
    pytest.mark.skipif(N.nginx_bin() is None, reason="nginx is not installed "
                       "(tools/install-deps.sh test installs it)"),
]


def replicas_config(tmp, ports):
    """The shipped replicas file with its three server addresses replaced (exactly three)."""
    with open(SHIPPED_REPLICAS) as f:
        text = f.read()
    it = iter(ports)
    text, n = re.subn(r"(?m)^(\s*server )127\.0\.0\.1:808[123]( [^;]*;)",
                      lambda m: "%s127.0.0.1:%d%s" % (m.group(1), next(it), m.group(2)), text)
    assert n == 3, "the shipped replicas config's three server lines changed"
    path = os.path.join(str(tmp), "xlserve-replicas.conf")
    with open(path, "w") as f:
        f.write(text)
    return path


class Cluster:
    def __init__(self, tmp, model, extra=()):
        self.tmp = tmp
        self.model = model
        self.extra = list(extra)
        self.redis = RedisServer(tmp / "redis")
        self.ports = [X.free_port() for _ in range(3)]
        self.replicas = [self.start_replica(i) for i in range(3)]
        self.nginx = N.Nginx(tmp / "nginx", None, shipped=replicas_config(tmp, self.ports))

    def start_replica(self, i):
        return X.Daemon(self.model, ["--store", "redis", "--redis-url",
                                     "redis://127.0.0.1:%d/0" % self.redis.port,
                                     "--redis-prefix", "t", "--trusted-proxies", "127.0.0.1",
                                     "--workers", "1", *self.extra], port=self.ports[i])

    def served_by(self, request_id):
        """The index of the replica that logged REQUEST_ID (nginx passes the client's on)."""
        def logged():  # the access log line follows the response by a moment
            return [i for i, d in enumerate(self.replicas)
                    if any(l.get("request_id") == request_id for l in d.requests_logged())]
        X.wait_until(logged, 10, "a replica logs request %s" % request_id)
        found = logged()
        assert len(found) == 1, (request_id, found)
        return found[0]

    def stop(self):
        self.nginx.stop()
        codes = []
        for d in self.replicas:
            if d.proc.poll() is None:
                codes.append((d.stop(), d))
        self.redis.stop()
        for code, d in codes:
            assert code == 0, d.tail()


@pytest.fixture
def cluster(tmp_path, tiny_model):
    c = Cluster(tmp_path, tiny_model)
    yield c
    c.stop()


def turn(port, sid, prompt, rid=None, n=12):
    """A greedy completion turn (prompt: text or token ids): (status, headers, body)."""
    h = {"X-Session-Id": sid} if sid else {}
    if rid:
        h["X-Request-Id"] = rid
    return X.post_json(port, "/v1/completions",
                       {"prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 0},
                       headers=h)


def ok_turn(port, sid, prompt, rid=None, n=12):
    st, _, b = turn(port, sid, prompt, rid, n)
    assert st == 200, b
    return b


def gen_ids(b):
    return X.ids_of(b["choices"][0]["logprobs"]["tokens"])


def equals_replay(port, b, transcript, q):
    """The session's turn b (prompt q) equals a stateless request over the whole transcript."""
    ref = ok_turn(port, None, transcript + list(q.encode()))
    assert b["choices"][0]["text"] == ref["choices"][0]["text"]
    for x, y in zip(X.lps(b), X.lps(ref)):
        assert abs(x - y) < 1e-4
    return transcript + list(q.encode()) + gen_ids(b)


def test_shipped_replicas_config_routes_by_header_and_fails_over():
    with open(SHIPPED_REPLICAS) as f:
        text = f.read()
    assert re.search(r"(?m)^\s*hash \$xlserve_session_key consistent;", text)
    nu = re.search(r"(?m)^\s*proxy_next_upstream ([^;]*);", text).group(1).split()
    assert {"error", "timeout", "http_503", "non_idempotent"} <= set(nu)
    assert len(re.findall(r"(?m)^\s*server 127\.0\.0\.1:808[123] max_fails=\d+ fail_timeout=\d+s;",
                          text)) == 3


def test_failover_after_kill_continues_and_stale_copies_reload(cluster):
    c = cluster
    sid, q = "conv-1", ["It is a truth universally acknowledged", " that a single man",
                        " in possession of a good fortune", " must be in want", " of a wife."]
    transcript = []
    for k in range(2):
        b = ok_turn(c.nginx.port, sid, q[k], rid="t%d" % k)
        transcript += list(q[k].encode()) + gen_ids(b)
    first = c.served_by("t0")
    assert c.served_by("t1") == first  # the header's hash keeps the session on one replica
    c.replicas[first].proc.send_signal(signal.SIGKILL)
    c.replicas[first].proc.wait(timeout=10)
    t0 = time.monotonic()
    b = ok_turn(c.nginx.port, sid, q[2], rid="t2")
    failover = time.monotonic() - t0
    second = c.served_by("t2")
    assert second != first
    transcript = equals_replay(c.nginx.port, b, transcript, q[2])
    print("failover: kill -9 to the next turn served through nginx: %.3f s" % failover)
    # the killed replica comes back: it serves the version the other one committed
    c.replicas[first] = c.start_replica(first)
    b = ok_turn(c.ports[first], sid, q[3], rid="t3")
    assert b["xlserve"]["session_tokens"] == len(transcript) + len(q[3]) + 12
    transcript = equals_replay(c.ports[first], b, transcript, q[3])
    # the second replica's RAM copy is now one version behind: it reloads instead of serving it
    stale_before = X.metric(c.ports[second], "xlserve_sessions_stale_total")
    b = ok_turn(c.ports[second], sid, q[4], rid="t4")
    transcript = equals_replay(c.ports[second], b, transcript, q[4])
    assert X.metric(c.ports[second], "xlserve_sessions_stale_total") == stale_before + 1
    st, s = X.get_session(c.nginx.port, sid)
    assert st == 200 and s["tokens"] == len(transcript) and s["turns"] == 5
    assert c.redis.command("HGET", "t:s:{%s:%s}" % ("0" * 64, sid), "seq") == "5"


def test_minted_ids_work_from_any_replica(cluster):
    c = cluster
    st, _, b = X.post_json(c.ports[0], "/v1/sessions", {})
    assert st == 201, b
    sid = b["id"]
    a = ok_turn(c.ports[1], sid, "Hello")
    assert a["xlserve"]["session_tokens"] == len("Hello") + 12
    st, _, lst = X.request(c.ports[2], "GET", "/v1/sessions")  # listed from the store
    assert st == 200 and sid in [x["id"] for x in json.loads(lst)["data"]]
    st, s = X.get_session(c.ports[2], sid)
    assert st == 200 and s["tokens"] == len("Hello") + 12


def race_round(c, sid, k):
    """Replica 0 (a stream) and replica 1 (a plain request) continue sid at once. Returns
    [(prompt, outcome, body)] with outcome 'won' or 'lost'."""
    qa, qb = " alpha %d." % k, " beta %d." % k
    results = {}
    barrier = threading.Barrier(2)

    def streamed():
        barrier.wait()
        st, h, events = X.stream(c.ports[0], "/v1/completions",
                                 {"prompt": qa, "max_tokens": 48, "temperature": 0,
                                  "logprobs": 0, "stream": True},
                                 headers={"X-Session-Id": sid})
        results["a"] = (st, events)

    def plain():
        barrier.wait()
        results["b"] = turn(c.ports[1], sid, qb, n=48)

    ts = [threading.Thread(target=streamed), threading.Thread(target=plain)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    out = []
    st, events = results["a"]
    assert st == 200
    chunks = X.sse_json(events)
    errors = [e["error"] for e in chunks if "error" in e]
    if errors:
        assert errors[0]["code"] == "session_conflict", errors
        out.append((qa, "lost", None))
    else:
        ids = []
        for e in chunks:
            for ch in e.get("choices", []):
                if ch.get("logprobs"):
                    ids += X.ids_of(ch["logprobs"]["tokens"])
        out.append((qa, "won", ids))
    st, h, b = results["b"]
    if st == 409:
        assert b["error"]["code"] == "session_conflict" and b["error"]["param"] == "session_id"
        out.append((qb, "lost", None))
    else:
        assert st == 200, b
        out.append((qb, "won", gen_ids(b)))
    return out


def fnv_digest(ids):
    """The transcript digest a session reports: FNV-1a 64 over the token ids fed (int32 LE)."""
    h = 0xcbf29ce484222325
    for tok in ids:
        for byte in int(tok).to_bytes(4, "little", signed=True):
            h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def test_concurrent_turns_on_two_replicas_one_wins_per_version(cluster):
    c = cluster
    sid = "race-1"
    p0 = "Two replicas, one conversation."
    b = ok_turn(c.ports[0], sid, p0, n=8)
    transcript = list(p0.encode()) + gen_ids(b)
    acknowledged, lost = 1, 0
    for k in range(30):
        res = race_round(c, sid, k)
        won = [r for r in res if r[1] == "won"]
        assert len(won) >= 1  # a refused turn means the other one was acknowledged
        lost += len(res) - len(won)
        acknowledged += len(won)
        # the stored history is one of the orders of the acknowledged turns (two winners ran
        # one after the other): the session's digest (the third replica loads it) says which
        st, s = X.get_session(c.ports[2], sid)
        assert st == 200
        for order in ([won] if len(won) == 1 else [won, won[::-1]]):
            t = list(transcript)
            for q, _, ids in order:
                t += list(q.encode()) + ids
            if s["transcript_digest"] == fnv_digest(t[:-1]):  # the last token is pending
                transcript = t
                break
        else:
            raise AssertionError("the stored transcript is not the acknowledged turns in a row")
        assert s["tokens"] == len(transcript)
        if lost >= 3:
            break
    assert lost >= 1, "no round raced (the two turns never overlapped)"
    # one version per acknowledged turn, and nothing of the refused ones
    assert c.redis.command("HGET", "t:s:{%s:%s}" % ("0" * 64, sid), "seq") == str(acknowledged)
    assert X.metric(c.ports[0], "xlserve_store_conflicts_total") + \
        X.metric(c.ports[1], "xlserve_store_conflicts_total") == lost
    b = ok_turn(c.ports[2], sid, " The end.")
    equals_replay(c.ports[2], b, transcript, " The end.")


def test_redis_down_answers_503_and_recovers(cluster):
    c = cluster
    sid = "down-1"
    p = "When the store is away"
    b = ok_turn(c.nginx.port, sid, p)
    transcript = list(p.encode()) + gen_ids(b)
    c.redis.stop()
    for port in (c.ports[0], c.nginx.port):
        st, h, body = turn(port, sid, " the replicas", n=4)
        assert st == 503, body
        assert h.get("retry-after") and int(h["retry-after"]) >= 1
        assert body["error"]["code"] in ("store_unavailable", "upstream_unavailable")
    st, h, body = turn(c.ports[0], sid, " the replicas", n=4)
    assert st == 503 and body["error"]["code"] == "store_unavailable"
    assert body["error"]["type"] == "server_error" and "Redis" in body["error"]["message"]
    ok_turn(c.ports[0], None, "stateless requests need no store", n=4)
    st, _, health = X.request(c.ports[0], "GET", "/health")
    assert st == 200 and json.loads(health)["status"] == "degraded"
    m = X.metrics(c.ports[0])
    assert m["xlserve_store_up"] == 0 and m["xlserve_store_unavailable_total"] >= 1
    c.redis.start()  # the same AOF: every acknowledged turn is there
    for d in c.replicas:  # they reconnect by themselves (a probe every second)
        X.wait_until(lambda: json.loads(X.request(d.port, "GET", "/health")[2])["status"] == "ok",
                     30, "the replica reconnects to Redis")
    assert X.metric(c.ports[0], "xlserve_store_up") == 1
    b = ok_turn(c.nginx.port, sid, " wait for it")
    equals_replay(c.nginx.port, b, transcript, " wait for it")


def test_ttl_on_one_replica_spares_a_session_another_one_uses(tmp_path, tiny_model):
    """session_ttl 2: replica 0 served a session once, replica 1 keeps using it. Replica 0's TTL
    timer forgets its idle RAM copy but must not delete the stored session (its last use, by
    replica 1, is recent): replica 1's turns continue the same transcript throughout."""
    c = Cluster(tmp_path, tiny_model, extra=["--session-ttl", "2"])
    try:
        sid = "ttl-1"
        b = ok_turn(c.ports[0], sid, "Kept alive elsewhere", n=4)
        tokens = b["xlserve"]["session_tokens"]
        t_end = time.monotonic() + 5  # two TTL sweeps of replica 0 at least
        turns = 0
        while time.monotonic() < t_end:
            b = ok_turn(c.ports[1], sid, " on", n=4)
            tokens += 3 + 4
            assert b["xlserve"]["session_tokens"] == tokens
            turns += 1
            time.sleep(0.4)  # a client's pace (the condition checked is the transcript)
        X.wait_until(lambda: X.metric(c.ports[0], "xlserve_sessions_in_ram") == 0, 10,
                     "replica 0 forgets its idle copy")
        b = ok_turn(c.ports[0], sid, " back", n=4)  # loads the current version
        assert b["xlserve"]["session_tokens"] == tokens + 5 + 4 and turns >= 8
    finally:
        c.stop()


def test_import_on_one_replica_replaces_another_ones_copy(cluster):
    """PUT state on replica 0 over a session replica 1 holds in RAM at the same version: replica
    1 then serves the imported state, not its copy."""
    c = cluster
    ok_turn(c.ports[1], "imp-1", "The copy in RAM", n=4)  # version 1 on replica 1
    src = ok_turn(c.ports[0], "imp-src", "An entirely different and longer conversation", n=6)
    st, _, blob = X.request(c.ports[0], "GET", "/v1/sessions/imp-src/state")
    assert st == 200
    st, _, b = X.request(c.ports[0], "PUT", "/v1/sessions/imp-1/state", blob,
                         headers={"Content-Type": "application/octet-stream"})
    assert st == 200, b
    b = ok_turn(c.ports[1], "imp-1", " next", n=4)
    assert b["xlserve"]["session_tokens"] == src["xlserve"]["session_tokens"] + 5 + 4


COMPOSE_REPLICAS = os.path.join(N.ROOT, "docker", "compose-replicas.yaml")


def test_compose_replicas_file_wires_redis_replicas_and_nginx(tmp_path):
    """docker/compose-replicas.yaml without a Docker engine: three replicas on store redis
    pointing at the redis service's address and trusting nginx's; nginx's start command turns
    the shipped replicas config into one naming the three replicas' addresses, which nginx
    accepts (run here, on the shipped file)."""
    yaml = pytest.importorskip("yaml")
    with open(COMPOSE_REPLICAS) as f:
        doc = yaml.safe_load(f)
    sv = doc["services"]
    addr = {name: s["networks"]["replicas"]["ipv4_address"] for name, s in sv.items()}
    replicas = sorted(n for n in sv if n.startswith("xlserve-"))
    assert len(replicas) == 3 and sv["redis"]["build"]["target"] == "redis"
    for n in replicas:
        env = sv[n]["environment"]
        assert env["XLSERVE_STORE"] == "redis"
        assert env["XLSERVE_REDIS_URL"] == "redis://%s:6379/0" % addr["redis"]
        assert env["XLSERVE_TRUSTED_PROXIES"] == addr["nginx"]
        assert sv[n]["depends_on"]["redis"]["condition"] == "service_healthy"
    script = sv["nginx"]["command"][2].replace("$$", "$")
    out = tmp_path / "xlserve.conf"
    script = script.replace("/usr/local/share/xlserve/nginx/xlserve-replicas.conf",
                            SHIPPED_REPLICAS).replace("/etc/nginx/conf.d/xlserve.conf", str(out))
    script = script.split("&& nginx -t")[0]
    r = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    servers = re.findall(r"(?m)^\s*server (\S+) max_fails", text)
    assert servers == ["%s:8080" % addr[n] for n in replicas]
    n = N.Nginx(tmp_path / "nginx", None, shipped=str(out))  # accepted and started
    n.stop()


def stream_turn(port, sid, prompt):
    """A greedy streamed turn with usage: ('acked', ids, session_tokens), ('cut', ids, None)
    (an in-band store_outcome_unknown after the text: the turn may or may not be kept),
    ('failed', ids, None) (an in-band store_failed or store_unavailable: the turn was not
    kept), or ('refused', [], None) (an HTTP error: nothing was fed)."""
    st, h, events = X.stream(port, "/v1/completions",
                             {"prompt": prompt, "max_tokens": 8, "temperature": 0, "logprobs": 0,
                              "stream": True, "stream_options": {"include_usage": True}},
                             headers={"X-Session-Id": sid})
    if st != 200:
        assert st in (503, 500), (st, events)
        return "refused", [], None
    ids, tokens, error = [], None, None
    for e in X.sse_json(events):
        if "error" in e:
            error = e["error"]
        for ch in e.get("choices", []):
            if ch.get("logprobs"):
                ids += X.ids_of(ch["logprobs"]["tokens"])
        if e.get("xlserve"):
            tokens = e["xlserve"]["session_tokens"]
    if error:
        assert error["code"] in ("store_failed", "store_unavailable",
                                 "store_outcome_unknown"), error
        return ("cut" if error["code"] == "store_outcome_unknown" else "failed"), ids, None
    assert tokens is not None, events
    return "acked", ids, tokens


def test_redis_killed_and_restarted_under_load_loses_no_acknowledged_turn(cluster):
    """Three clients run turns through nginx while redis-server is killed (SIGKILL) and
    restarted on its AOF (appendfsync always). Afterwards each session's stored transcript
    (its digest and length) is the client's acknowledged turns in order, plus possibly turns
    whose stream ended in store_outcome_unknown (their commit may have landed): no
    acknowledged turn is lost or doubled, and no turn answered "not kept" (store_failed) is in
    the session."""
    c = cluster
    stop = threading.Event()
    logs = {}

    def client(sid):
        log = logs[sid] = []
        k = 0
        while not stop.is_set():
            q = " p%d" % k
            outcome, ids, tokens = stream_turn(c.nginx.port, sid, q)
            log.append((q, outcome, ids, tokens))
            k += 1
            if outcome != "acked":
                time.sleep(0.05)  # a client's retry pace while the store is away

    ts = [threading.Thread(target=client, args=("load-%d" % i,)) for i in range(3)]
    for t in ts:
        t.start()
    X.wait_until(lambda: all(sum(1 for x in logs.get("load-%d" % i, []) if x[1] == "acked") >= 3
                             for i in range(3)), 60, "every client has acknowledged turns")
    c.redis.kill9()
    at_kill = {sid: len(log) for sid, log in logs.items()}
    c.redis.start()
    X.wait_until(lambda: all(sum(1 for x in log[at_kill[sid]:] if x[1] == "acked") >= 3
                             for sid, log in logs.items()), 60,
                 "three turns of each client acknowledged after the restart")
    stop.set()
    for t in ts:
        t.join(60)
    for sid, log in logs.items():
        st, s = X.get_session(c.nginx.port, sid)
        assert st == 200
        unknown = [i for i, x in enumerate(log) if x[1] == "cut"]
        matches = []
        for mask in range(1 << len(unknown)):
            kept = {unknown[b] for b in range(len(unknown)) if mask >> b & 1}
            t, fits = [], True
            for i, (q, outcome, ids, tokens) in enumerate(log):
                if outcome == "acked" or i in kept:
                    t += list(q.encode()) + ids
                if outcome == "acked" and tokens != len(t):
                    fits = False
            if fits and s["tokens"] == len(t) and s["transcript_digest"] == fnv_digest(t[:-1]):
                matches.append(kept)
        assert matches, "session %s: the stored transcript is not its acknowledged turns " \
            "(outcomes %s)" % (sid, [x[1] for x in log])
        print("%s: %s" % (sid, " ".join(x[1] for x in log)))
    assert any(x[1] != "acked" for log in logs.values() for x in log), \
        "no turn met the outage (Redis restarted too fast to be seen)"


def test_the_log_says_what_an_acknowledged_turn_survives(tmp_path, tiny_model, start_daemon):
    """At start the daemon reads Redis's persistence settings and says what `turn` durability
    then means; a password in redis_url never reaches the log or --dump-config."""
    for persistence, says in ((("--appendonly", "yes", "--appendfsync", "always"),
                               "appendfsync always: an acknowledged turn is on Redis's disk"),
                              (("--appendonly", "yes", "--appendfsync", "everysec"),
                               "a power loss may lose about the last second"),
                              (("--appendonly", "no"), "lives in Redis's RAM only")):
        r = RedisServer(tmp_path / ("redis-" + persistence[-1]), persistence)
        try:
            d = start_daemon(tiny_model, "--store", "redis", "--redis-url",
                             "redis://127.0.0.1:%d/0" % r.port)
            ev = d.wait_log(lambda o: o.get("event") == "store")
            assert says in ev["msg"] and "127.0.0.1:%d" % r.port in ev["msg"], ev
            assert d.stop() == 0, d.tail()
        finally:
            r.stop()
    out = subprocess.run([X.xlserve_bin(), "serve", "--model", tiny_model, "--store", "redis",
                          "--redis-url", "redis://:hunter2@10.0.0.5:6379/1", "--dump-config"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "hunter2" not in out.stdout
    assert re.search(r"(?m)^redis_url .*redacted", out.stdout), out.stdout
    bad = subprocess.run([X.xlserve_bin(), "serve", "--model", tiny_model, "--store", "redis",
                          "--redis-url", "redis://127.0.0.1:99999/0"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1
    assert "xlserve: option redis_url: 'redis://127.0.0.1:99999/0': bad port" in bad.stderr


def test_wait_for_redis_replicas(tmp_path, tiny_model, start_daemon):
    """redis_wait_replicas 1: each commit WAITs for one Redis replica. Without one, a turn is
    still acknowledged (it is on the primary) but the shortfall is logged and counted; with a
    replica attached (redis-server --replicaof), none."""
    primary = RedisServer(tmp_path / "primary")
    secondary = None
    try:
        d = start_daemon(tiny_model, "--store", "redis", "--redis-url",
                         "redis://127.0.0.1:%d/0" % primary.port, "--redis-wait-replicas", "1",
                         "--redis-wait-timeout-ms", "200")
        assert "waits for 1 replica" in d.wait_log(lambda o: o.get("event") == "store")["msg"]
        ok_turn(d.port, "w-1", "Alone", n=4)
        assert X.metric(d.port, "xlserve_store_wait_shortfalls_total") >= 1
        d.wait_log(lambda o: o.get("event") == "store_wait_shortfall")
        secondary = RedisServer(tmp_path / "secondary",
                          ("--appendonly", "no", "--replicaof", "127.0.0.1", str(primary.port)))
        X.wait_until(lambda: primary.command("WAIT", "1", "100") == ":1", 30,
                     "the Redis replica is in sync")
        # a commit of the first turn may still be in its WAIT, begun before the replica was
        # there: it ends within the 200 ms wait timeout; take the count once it stands still
        # for a second, so that only the turns below can move it
        last = [None, 0.0]

        def count_settled():
            v, now = X.metric(d.port, "xlserve_store_wait_shortfalls_total"), time.monotonic()
            if v != last[0]:
                last[:] = [v, now]
            return now - last[1] >= 1.0
        X.wait_until(count_settled, 30, "the shortfall count stands still")
        before = last[0]
        for k in range(3):
            ok_turn(d.port, "w-1", " and replicated %d" % k, n=4)
        assert X.metric(d.port, "xlserve_store_wait_shortfalls_total") == before
        assert secondary.command("EXISTS", "xls:s:{%s:w-1}" % ("0" * 64)) == ":1"
    finally:
        if secondary:
            secondary.stop()
        primary.stop()

"""Idempotency-Key on turns: a retried key whose turn was kept gets the kept answer
(Idempotent-Replayed: true) and never feeds the session twice; another body under the same key
is 422 idempotency_key_reused; a key whose request still runs is 409
idempotency_key_in_progress. Without a store (the in-memory table), on SQLite (the record is in
the turn's transaction: it survives kill -9), and on Redis (the record is in the turn's commit
script: a reply cut after Redis applied the turn, then a retry with the key, replays it)."""
import http.client
import json
import signal
import threading
import time

import pytest

import xlharness as X
from redisserver import REDIS, RedisServer
from test_store import APPEND_SCRIPT, CuttingProxy, redis_port, stored_tokens  # noqa: F401


def turn(port, sid, prompt, key, n=4, stream=False, timeout=60, **kw):
    """One completion in session sid with Idempotency-Key key: (status, headers, body)."""
    body = dict(prompt=prompt, max_tokens=n, temperature=0, **kw)
    if stream:
        body["stream"] = True
    h = {"X-Session-Id": sid}
    if key is not None:
        h["Idempotency-Key"] = key
    if stream:
        return X.stream(port, "/v1/completions", body, headers=h, timeout=timeout)
    return X.post_json(port, "/v1/completions", body, headers=h, timeout=timeout)


def replay_stream(port, sid, prompt, key, n=4):
    """A streaming request whose answer is expected as a JSON body (a replay, an error)."""
    body = dict(prompt=prompt, max_tokens=n, temperature=0, stream=True)
    st, h, b = X.request(port, "POST", "/v1/completions", body,
                         {"X-Session-Id": sid, "Idempotency-Key": key})
    return st, h, json.loads(b)


def tokens_of(port, sid):
    st, s = X.get_session(port, sid)
    assert st == 200, s
    return s["tokens"]


def test_retries_replay_without_a_store(start_daemon, tiny_model):
    d = start_daemon(tiny_model)
    st, h, b1 = turn(d.port, "a", "It is a truth", "k-1")
    assert st == 200 and "idempotent-replayed" not in h, b1
    t1 = tokens_of(d.port, "a")
    assert b1["xlserve"]["session_tokens"] == t1
    # the same request again: the kept answer, byte for byte the same JSON, and no second feed
    st, h, b2 = turn(d.port, "a", "It is a truth", "k-1")
    assert st == 200 and h.get("idempotent-replayed") == "true", b2
    assert b2 == b1
    assert tokens_of(d.port, "a") == t1
    # another body under the same key: refused, nothing fed
    st, _, b = turn(d.port, "a", "universally acknowledged", "k-1")
    assert st == 422 and b["error"]["code"] == "idempotency_key_reused", b
    assert b["error"]["param"] == "Idempotency-Key"
    assert tokens_of(d.port, "a") == t1
    # a key is scoped by its session: the same key on another session is a new request
    st, h, b = turn(d.port, "b", "It is a truth", "k-1")
    assert st == 200 and "idempotent-replayed" not in h
    # a new key feeds
    st, _, b3 = turn(d.port, "a", " universally", "k-2")
    assert st == 200 and tokens_of(d.port, "a") > t1
    # a stream's kept answer is replayed as the equivalent full body
    st, h, ev = turn(d.port, "a", " acknowledged", "k-3", stream=True)
    assert st == 200
    chunks = X.sse_json(ev)
    text = "".join(c["choices"][0]["text"] for c in chunks if c.get("choices"))
    t3 = tokens_of(d.port, "a")
    st, h, b = replay_stream(d.port, "a", " acknowledged", "k-3")
    assert st == 200 and h.get("idempotent-replayed") == "true", b
    assert h["content-type"].startswith("application/json")
    assert b["object"] == "text_completion" and b["choices"][0]["text"] == text
    assert b["xlserve"]["session_tokens"] == t3 == tokens_of(d.port, "a")
    # malformed keys are refused; a request without a session ignores its key
    st, _, b = turn(d.port, "a", "x", "two words")
    assert st == 400 and b["error"]["param"] == "Idempotency-Key", b
    st, _, b = turn(d.port, "a", "x", "k" * 256)
    assert st == 400, b
    for _ in range(2):
        st, h, b = X.post_json(d.port, "/v1/completions", dict(prompt="x", max_tokens=1),
                               headers={"Idempotency-Key": "stateless"})
        assert st == 200 and "idempotent-replayed" not in h


def test_a_key_still_running_is_409(start_daemon, medium_model):
    """A retry that arrives while the first request with the key still runs is refused (409
    idempotency_key_in_progress), not run beside it."""
    d = start_daemon(medium_model, "--max-tokens-limit", "100000")
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
    body = dict(prompt="Once", max_tokens=100000, temperature=0, stream=True)
    c.request("POST", "/v1/completions", body=json.dumps(body).encode(),
              headers={"Content-Type": "application/json", "X-Session-Id": "r",
                       "Idempotency-Key": "slow"})
    r = c.getresponse()
    assert r.status == 200
    assert r.read(6) == b"data: "  # it runs
    st, _, b = turn(d.port, "r", "Once", "slow", n=100000)
    assert st == 409 and b["error"]["code"] == "idempotency_key_in_progress", b
    c.close()  # the client leaves: the turn is cancelled (kept as far as it went)

    def settled():
        st, s = X.get_session(d.port, "r")
        return st == 200 and not s["busy"]
    X.wait_until(settled, 30, "the cancelled turn ends")
    t = tokens_of(d.port, "r")
    st, _, b = replay_stream(d.port, "r", "Once", "slow", n=100000)
    # its turn was kept without a recorded answer: not run again, its token count said
    assert st == 409, b
    assert b["error"]["code"] == "idempotent_turn_kept" and str(t) in b["error"]["message"], b
    assert tokens_of(d.port, "r") == t


def test_sqlite_kept_turn_replays_after_kill9(start_daemon, tiny_model, tmp_path):
    """The record is in the turn's transaction: after kill -9 and a restart, a retry of an
    acknowledged turn gets its answer back instead of feeding it again."""
    state = str(tmp_path / "state")
    d = X.Daemon(tiny_model, ["--store", "sqlite", "--state-dir", state])
    try:
        st, _, b1 = turn(d.port, "s", "Mr. Darcy", "retry-1")
        assert st == 200
        t1 = b1["xlserve"]["session_tokens"]
    finally:
        d.proc.send_signal(signal.SIGKILL)
        d.stop()
    d2 = start_daemon(tiny_model, "--store", "sqlite", "--state-dir", state)
    st, h, b2 = turn(d2.port, "s", "Mr. Darcy", "retry-1")
    assert st == 200 and h.get("idempotent-replayed") == "true", b2
    assert b2 == b1 and tokens_of(d2.port, "s") == t1
    st, _, b = turn(d2.port, "s", "Mr. Bingley", "retry-1")
    assert st == 422, b
    st, _, b3 = turn(d2.port, "s", " and", "retry-2")
    assert st == 200 and b3["xlserve"]["session_tokens"] > t1


def test_redis_lost_reply_then_retry_replays(start_daemon, tiny_model, redis_port):
    """The append script of a turn runs in Redis but its reply is cut: 503
    store_outcome_unknown. The client retries with the same key: the answer kept with the
    turn comes back (Idempotent-Replayed), and the session holds the turn once."""
    proxy = CuttingProxy(redis_port)
    d = start_daemon(tiny_model, "--store", "redis", "--redis-url",
                     "redis://127.0.0.1:%d/0" % proxy.port, "--redis-prefix", "t")
    st, _, b0 = turn(d.port, "u", "Anne Elliot", None, n=6)
    assert st == 200
    proxy.arm(APPEND_SCRIPT, "reply")
    st, h, b = turn(d.port, "u", " was vain", "cut-1", n=6)
    assert proxy.cuts == 1
    assert st == 503 and b["error"]["code"] == "store_outcome_unknown", b
    kept = stored_tokens(redis_port, "u")
    assert kept > b0["xlserve"]["session_tokens"]  # Redis applied the turn

    def retry():  # after the reconnection's backoff (503 store_unavailable meanwhile)
        st, h, b = turn(d.port, "u", " was vain", "cut-1", n=6)
        assert st in (200, 503), b
        return (h, b) if st == 200 else None
    X.wait_until(retry, 10, "the retry is answered")
    h, b = retry()
    assert h.get("idempotent-replayed") == "true", b
    assert b["xlserve"]["session_tokens"] == kept
    assert stored_tokens(redis_port, "u") == kept == tokens_of(d.port, "u")
    proxy.close()


@pytest.mark.skipif(REDIS is None, reason="redis-server is not installed "
                    "(tools/install-deps.sh test installs it)")
def test_redis_kill9_under_load_with_keys_feeds_each_turn_once(start_daemon, tiny_model,
                                                                tmp_path):
    """Clients send turns with Idempotency-Keys and retry each one (same key, same body) on
    503 or a connection error until it is answered, while redis-server is killed (SIGKILL)
    and restarted on its AOF, three times. At the end every session's token count is exactly
    the sum of its acknowledged turns (each answered once, a replay counted once): no double
    feed, and no turn reported as not kept that was kept. Prints the counts."""
    redis = RedisServer(tmp_path / "redis")
    d = start_daemon(tiny_model, "--store", "redis", "--redis-url",
                     "redis://127.0.0.1:%d/0" % redis.port, "--redis-prefix", "t")
    stop = threading.Event()
    n_clients = 4
    stats = {"turns": 0, "attempts": 0, "retries": 0, "replays": 0, "503": 0,
             "503 store_outcome_unknown": 0, "500 store_failed": 0, "connection errors": 0,
             "false not kept": 0, "other": []}
    mu = threading.Lock()
    acked = {}  # sid -> [(key, prompt+completion tokens, session_tokens)]

    def client(i):
        sid = "load-%d" % i
        log = acked[sid] = []
        k = 0
        while not stop.is_set():
            key = "%s-turn-%d" % (sid, k)
            prompt = " q%d" % k
            tries = 0
            said_not_kept = False
            while True:
                tries += 1
                try:
                    st, h, b = turn(d.port, sid, prompt, key, n=3, timeout=30)
                except (OSError, http.client.HTTPException):
                    st, h, b = None, {}, None
                with mu:
                    stats["attempts"] += 1
                    if st is None:
                        stats["connection errors"] += 1
                    elif st == 503:
                        stats["503"] += 1
                        if b["error"]["code"] == "store_outcome_unknown":
                            stats["503 store_outcome_unknown"] += 1
                    elif st == 500 and b["error"]["code"] == "store_failed":
                        stats["500 store_failed"] += 1
                        said_not_kept = True
                    elif st != 200:
                        stats["other"].append((st, b))
                if st == 200:
                    break
                if st not in (None, 500, 503):
                    return  # unexpected: reported by the assertions below
                time.sleep(0.05)  # the client's retry pace
            u = b["usage"]
            with mu:
                stats["turns"] += 1
                stats["retries"] += tries - 1
                stats["replays"] += h.get("idempotent-replayed") == "true"
                # answered "not kept" earlier, yet its record (written only with the turn) is
                # there: the turn had been kept
                stats["false not kept"] += said_not_kept and h.get("idempotent-replayed") == "true"
            log.append((key, u["prompt_tokens"] + u["completion_tokens"],
                        b["xlserve"]["session_tokens"]))
            k += 1

    def acked_turns():
        with mu:
            return stats["turns"]

    ts = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
    for t in ts:
        t.start()
    try:
        for cycle in range(3):
            base = acked_turns()
            X.wait_until(lambda: acked_turns() >= base + 4 * n_clients, 60,
                         "turns acknowledged before kill %d" % (cycle + 1))
            redis.kill9()
            time.sleep(0.3)  # an outage the clients meet (their retries get 503 meanwhile)
            redis.start()
        base = acked_turns()
        X.wait_until(lambda: acked_turns() >= base + 4 * n_clients, 60,
                     "turns acknowledged after the last restart")
    finally:
        stop.set()
        for t in ts:
            t.join(60)
    assert not stats["other"], stats["other"][:3]
    assert stats["false not kept"] == 0
    for sid, log in acked.items():
        total = sum(n for _, n, _ in log)
        st, s = X.get_session(d.port, sid)
        assert st == 200, s
        assert s["tokens"] == total, "session %s: %d tokens, its acknowledged turns sum to %d " \
            "(%s)" % (sid, s["tokens"], total, log)
        # each answer (a replay too) says the count after its own turn
        run = 0
        for key, n, after in log:
            run += n
            assert after == run, (sid, key, after, run)
    print("\nRedis kill -9 x3 under load, %d clients with Idempotency-Keys: %s" % (
        n_clients, ", ".join("%s %d" % (k, v) for k, v in stats.items() if k != "other")))
    assert stats["503"] + stats["connection errors"] > 0, "no turn met an outage"
    redis.stop()

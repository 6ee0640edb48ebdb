"""nginx (Debian's package) on loopback with the SHIPPED config/nginx/xlserve.conf in front of
real daemons: streams arrive token by token through it, sessions stick to one daemon (consistent
hash of X-Session-Id) and continue, a client leaving nginx cancels the generation upstream,
X-Request-Id / X-Forwarded-For reach the daemon (which trusts them from 127.0.0.1 only)."""
import http.client
import json
import re
import time

import pytest

import deployharness as N
import xlharness as X
from rawhttp import send_raw, status_codes

pytestmark = pytest.mark.skipif(N.nginx_bin() is None,
                                reason="nginx is not installed (tools/install-deps.sh installs it)")


@pytest.fixture
def nginx_in_front(tmp_path):
    started = []

    def start(*daemons):
        n = N.Nginx(tmp_path / ("nginx%d" % len(started)),
                    [("127.0.0.1", d.port) for d in daemons])
        started.append(n)
        return n

    yield start
    for n in started:
        n.stop()


def directives(text):
    """(name, args) of every directive of an nginx config, comments removed."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.match(r"([a-z_]+)\s+(.*?);\s*$", line)
        if m:
            out.append((m.group(1), m.group(2)))
    return out


def test_shipped_config_has_the_essentials():
    """What the tests below cannot observe on loopback: the read timeout outlives the pings,
    upstream keep-alive, the body limit at most the daemon's."""
    with open(N.SHIPPED) as f:
        d = directives(f.read())
    get = lambda name: [a for n, a in d if n == name]  # noqa: E731
    assert get("proxy_http_version") and set(get("proxy_http_version")) == {"1.1"}
    assert '""' in [a.split()[-1] for a in get("proxy_set_header") if a.startswith("Connection")]
    assert get("proxy_buffering") == ["off"]
    assert get("hash") == ["$xlserve_session_key consistent"]
    assert get("keepalive") and int(get("keepalive")[0]) > 0
    assert int(get("keepalive_timeout")[0].rstrip("s")) < 75  # the daemon's idle_timeout
    assert int(get("proxy_read_timeout")[0].rstrip("s")) > 15  # the daemon's ping_interval
    assert get("client_max_body_size") == ["1m"]  # = max_body_bytes (1 MiB)
    assert get("proxy_ignore_client_abort") == ["off"]


def test_stream_arrives_incrementally_through_nginx(start_daemon, nginx_in_front, medium_model):
    d = start_daemon(medium_model, "--trusted-proxies", "127.0.0.1")
    n = nginx_in_front(d)

    def timed_stream(port):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", "/v1/completions", body=json.dumps(
            {"prompt": "Once upon a time", "max_tokens": 1500, "temperature": 0, "stream": True}),
            headers={"Content-Type": "application/json"})
        t0 = time.monotonic()
        r = c.getresponse()
        assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
        reads, buf = X.timed_reads(r, t0)
        c.close()
        return [t for t, _ in reads], buf

    direct, dbuf = timed_stream(d.port)
    proxied, pbuf = timed_stream(n.port)
    assert pbuf.endswith(b"data: [DONE]\n\n")
    # the same events (greedy decoding; ids differ)
    strip = lambda b: re.sub(rb'"(id|created)":("[^"]*"|\d+)', b"", b)  # noqa: E731
    assert strip(pbuf) == strip(dbuf)
    total = proxied[-1]
    assert len(proxied) >= 20, proxied[:5]
    # the first token arrives long before the last, as it does without nginx
    assert proxied[0] < 0.25 * total, (proxied[0], total, direct[0], direct[-1])


def test_session_sticks_to_one_daemon_and_continues(start_daemon, nginx_in_front, tiny_model):
    a = start_daemon(tiny_model, "--trusted-proxies", "127.0.0.1")
    b = start_daemon(tiny_model, "--trusted-proxies", "127.0.0.1")
    n = nginx_in_front(a, b)
    chat = lambda sid, text: X.post_json(n.port, "/v1/chat/completions", {  # noqa: E731
        "messages": [{"role": "user", "content": text}], "max_tokens": 8, "temperature": 0},
        {"X-Session-Id": sid})
    sids = ["affinity-%d" % i for i in range(16)]
    first = {}
    for sid in sids:
        st, _, body = chat(sid, "Good morning!")
        assert st == 200, body
        first[sid] = body["xlserve"]["session_tokens"]
    # the second turn of every session continues its memory: some daemon already has it
    for sid in sids:
        st, _, body = chat(sid, "And how is your sister?")
        assert st == 200, body
        assert body["xlserve"]["session_tokens"] > first[sid]
        assert body["xlserve"]["history"] != "new"
        # the session endpoints route by the id in the path
        st, _, info = X.request(n.port, "GET", "/v1/sessions/" + sid)
        assert st == 200, info
        assert json.loads(info)["tokens"] == body["xlserve"]["session_tokens"]
    # each session lives on exactly one daemon, and the sessions are spread over both
    owner = {}
    for d in (a, b):
        for line in d.requests_logged():
            if line.get("session") in first:
                assert owner.setdefault(line["session"], d.port) == d.port, line
    assert set(owner) == set(sids)
    assert set(owner.values()) == {a.port, b.port}
    # requests without a session id are spread over both (round robin)
    for i in range(6):
        st, _, body = X.post_json(n.port, "/v1/completions", {"prompt": "hi", "max_tokens": 2})
        assert st == 200, body
    loose = lambda d: len([l for l in d.requests_logged()  # noqa: E731
                           if l.get("path") == "/v1/completions" and not l.get("session")])
    deadline = time.monotonic() + 10
    while loose(a) + loose(b) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert loose(a) + loose(b) == 6 and min(loose(a), loose(b)) >= 2, (loose(a), loose(b))


def test_request_id_and_forwarded_for_reach_the_daemon(start_daemon, nginx_in_front, tiny_model):
    d = start_daemon(tiny_model, "--trusted-proxies", "127.0.0.1")
    n = nginx_in_front(d)
    st, h, _ = X.request(n.port, "GET", "/health", headers={"X-Request-Id": "trace-42"})
    assert st == 200 and h["x-request-id"] == "trace-42"
    assert d.wait_log(lambda o: o.get("request_id") == "trace-42")["path"] == "/health"
    # without one, nginx's own $request_id (32 hex digits) is used by the daemon
    st, h, _ = X.request(n.port, "GET", "/health")
    assert re.fullmatch(r"[0-9a-f]{32}", h["x-request-id"]), h
    d.wait_log(lambda o: o.get("request_id") == h["x-request-id"])
    # the client address comes from X-Forwarded-For (nginx appends the peer: 127.0.0.1, a proxy)
    st, h, _ = X.request(n.port, "GET", "/health",
                         headers={"X-Forwarded-For": "203.0.113.9", "X-Request-Id": "xff-1"})
    assert d.wait_log(lambda o: o.get("request_id") == "xff-1")["remote"] == "203.0.113.9"
    # a body over the limit (the daemon's, 1 MiB) is refused by nginx, in the daemon's JSON shape
    st, h, body = X.request(n.port, "POST", "/v1/completions", b"x" * ((1 << 20) + 1),
                            headers={"Content-Type": "application/json"})
    assert st == 413 and json.loads(body)["error"]["code"] == "body_too_large"
    # one at the limit passes nginx and reaches the daemon (not JSON: 400 invalid_json)
    st, h, body = X.request(n.port, "POST", "/v1/completions", b"x" * (1 << 20),
                            headers={"Content-Type": "application/json"})
    assert st == 400 and json.loads(body)["error"]["code"] == "invalid_json"
    d.wait_log(lambda o: o.get("status") == 400 and o.get("path") == "/v1/completions")


def test_client_abort_through_nginx_cancels_upstream(start_daemon, nginx_in_front, tiny_model):
    d = start_daemon(tiny_model, "--trusted-proxies", "127.0.0.1", "--max-running", "1",
                     "--max-queue", "4", "--max-tokens-limit", "10000000")
    n = nginx_in_front(d)
    c = http.client.HTTPConnection("127.0.0.1", n.port, timeout=30)
    c.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": "endless", "max_tokens": 10000000, "stream": True}),
        headers={"Content-Type": "application/json", "X-Session-Id": "abort-1"})
    r = c.getresponse()
    assert r.status == 200 and r.read1(65536)
    c.close()  # the client leaves nginx
    t0 = time.monotonic()
    log = d.wait_log(lambda o: o.get("session") == "abort-1" and
                     o.get("path") == "/v1/completions", timeout=10)
    assert log["finish"] == "cancelled" and log["client_gone"] is True, log
    assert time.monotonic() - t0 < 5
    assert log["tokens_out"] < 10000000
    # the worker is free (max_running 1): the next request runs at once, through nginx
    st, _, body = X.post_json(n.port, "/v1/completions", {"prompt": "next", "max_tokens": 3})
    assert st == 200, body
    # the session holds exactly what was fed, and continues through nginx
    st, _, s = X.request(n.port, "GET", "/v1/sessions/abort-1")
    s = json.loads(s)
    assert s["busy"] is False and s["tokens"] == len("endless") + log["tokens_out"]
    st, _, body = X.post_json(n.port, "/v1/completions", {"prompt": "!", "max_tokens": 2},
                              {"X-Session-Id": "abort-1"})
    assert st == 200 and body["xlserve"]["session_tokens"] == s["tokens"] + 3
    assert X.metric(d.port, "xlserve_generations_cancelled_total") >= 1


@pytest.mark.parametrize("value", [b"-1", b"+29", b"29, 29"])
def test_nginx_refuses_a_malformed_content_length(start_daemon, nginx_in_front, tiny_model,
                                                  value):
    """nginx answers these once with its own 400 and never passes them on (the daemon, reached
    directly, answers them once too: tests/integration/test_request_framing.py)."""
    d = start_daemon(tiny_model, "--trusted-proxies", "127.0.0.1")
    n = nginx_in_front(d)
    before = len(d.requests_logged())
    body = b'{"prompt": "a", "max_tokens": 1}'
    got = send_raw(n.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Type: application/json\r\nContent-Length: " + value +
                           b"\r\n\r\n" + body)
    assert got.startswith(b"HTTP/1.1 400"), got
    assert status_codes(got) == [400], got
    assert len(d.requests_logged()) == before  # never passed on

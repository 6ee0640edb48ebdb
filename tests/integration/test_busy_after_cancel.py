"""Stop, then send at once (same session): the next turn waits for the stopped turn's job to
wind down instead of getting 409 `session_busy` (clients such as LangChain do not retry a 409).
A session busy with a live turn is still 409 at once. Real HTTP on loopback."""
import http.client
import json
import socket
import time

import pytest

import xlharness as X


@pytest.fixture(scope="module", params=["ram", "sqlite"])
def busy_daemon(request, tiny_model, tmp_path_factory):
    """Without a store, and with SQLite (a turn's end then also waits for its commit)."""
    more = []
    if request.param == "sqlite":
        more = ["--state-dir", str(tmp_path_factory.mktemp("busy_state"))]
    d = X.Daemon(tiny_model, ["--max-tokens-limit", "1000000", *more])
    yield d
    assert d.stop() == 0, d.tail()


def start_stream(port, sid):
    """A long stream in session sid, read up to its first token; returns the connection."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": "Once upon a time", "max_tokens": 500000, "stream": True}).encode(),
        headers={"Content-Type": "application/json", "X-Session-Id": sid})
    r = c.getresponse()
    assert r.status == 200, r.read()
    buf = b""
    while b"data: {" not in buf:
        chunk = r.read1(65536)
        assert chunk, buf
        buf += chunk
    return c, r


def stop(c, how):
    """The client stops reading and leaves: a plain close (with unread bytes: a reset), or a
    FIN first."""
    if how == "fin":
        c.sock.shutdown(socket.SHUT_RDWR)
    c.close()


def test_stop_then_send_at_once_is_served(busy_daemon):
    port = busy_daemon.port
    statuses, waits = [], []
    for i in range(20):
        sid = "stop-%d" % i
        c, _ = start_stream(port, sid)
        stop(c, "fin" if i % 2 else "close")
        t0 = time.monotonic()
        st, _, b = X.post_json(port, "/v1/completions",
                               {"prompt": " and then", "max_tokens": 1},
                               headers={"X-Session-Id": sid})
        waits.append(time.monotonic() - t0)
        statuses.append((st, (b or {}).get("error", {}).get("code")))
    print("20 sends right after a stop: statuses %s, slowest answer %.3f s" %
          (sorted(set(statuses)), max(waits)))
    assert all(st == 200 for st, _ in statuses), statuses
    assert max(waits) < 2.5, waits  # bounded by the 2 s wait (plus one step)


def test_a_session_busy_with_a_live_turn_is_409_at_once(busy_daemon):
    port = busy_daemon.port
    c, r = start_stream(port, "live")
    try:
        t0 = time.monotonic()
        st, _, b = X.post_json(port, "/v1/completions", {"prompt": "x", "max_tokens": 1},
                               headers={"X-Session-Id": "live"})
        took = time.monotonic() - t0
        assert st == 409 and b["error"]["code"] == "session_busy", b
        assert took < 1.0, took  # no wait: the holding turn is alive
        # the live stream goes on
        assert r.read1(65536)
    finally:
        stop(c, "close")
    # and once it is stopped, the session serves again
    b = X.complete(port, "live", prompt="y", max_tokens=1)
    assert b["choices"]

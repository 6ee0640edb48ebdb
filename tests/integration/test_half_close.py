"""A client that half-closes its socket after sending (shutdown(SHUT_WR), allowed in HTTP/1.1:
it still reads). From the daemon's side a half-close and a full close look the same (a FIN)
until something is written, so:
- a stream is served to the end: its next chunk tells whether the peer still reads, and a peer
  that closed for good answers it with a reset, which cancels the generation;
- a request that writes nothing until its end (non-stream generation) takes the FIN as the
  client gone and is cancelled (docs/api.md, "Half-closed clients");
- requests answered at once (health, errors) are served."""
import json
import socket
import time

import xlharness as X


def send_and_half_close(port, method, path, body=None, headers=(), half_close=True):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    data = json.dumps(body).encode() if body is not None else b""
    head = "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" % (method, path)
    head += "".join("%s: %s\r\n" % h for h in headers)
    head += "Content-Length: %d\r\n\r\n" % len(data)
    s.sendall(head.encode() + data)
    if half_close:
        s.shutdown(socket.SHUT_WR)
    return s


def read_all(s, timeout=30):
    s.settimeout(timeout)
    got = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        got += chunk
    s.close()
    return got


def test_stream_is_served_to_a_half_closed_client(start_daemon, medium_model):
    d = start_daemon(medium_model)
    s = send_and_half_close(d.port, "POST", "/v1/completions",
                            {"prompt": "once upon", "max_tokens": 200, "stream": True},
                            [("X-Session-Id", "hc-1")])
    got = read_all(s)
    assert got.startswith(b"HTTP/1.1 200"), got[:200]
    assert b"data: [DONE]" in got
    log = d.wait_log(lambda o: o.get("session") == "hc-1" and o.get("event") == "request")
    assert log["status"] == 200 and log["tokens_out"] == 200 and not log.get("client_gone")
    assert log["finish"] == "length"


def test_half_closed_stream_whose_client_then_leaves_is_cancelled(start_daemon, medium_model):
    d = start_daemon(medium_model, "--max-tokens-limit", "10000000")
    s = send_and_half_close(d.port, "POST", "/v1/completions",
                            {"prompt": "x", "max_tokens": 10000000, "stream": True},
                            [("X-Session-Id", "hc-2")])
    s.settimeout(30)
    assert s.recv(65536).startswith(b"HTTP/1.1 200")
    s.close()  # now gone for good: the next chunk draws a reset
    t0 = time.monotonic()
    log = d.wait_log(lambda o: o.get("session") == "hc-2" and o.get("event") == "request")
    assert log["finish"] == "cancelled" and log["client_gone"] is True
    assert time.monotonic() - t0 < 5


def test_queued_stream_whose_client_left_is_cancelled_at_once(start_daemon, medium_model):
    """A client that closes for good while its stream waits in the queue: its FIN makes the
    daemon write a ping at once, and the reset that answers it cancels the stream while still
    queued (pings are off here, and the only running slot stays busy). (A client that first
    half-closed and leaves later is noticed at the stream's next write: a token or a ping.)"""
    d = start_daemon(medium_model, "--max-running", "1", "--max-tokens-limit", "10000000",
                     "--ping-interval", "0")
    blocker = send_and_half_close(d.port, "POST", "/v1/completions",
                                  {"prompt": "b", "max_tokens": 10000000, "stream": True})
    blocker.settimeout(30)
    assert blocker.recv(65536).startswith(b"HTTP/1.1 200")
    s = send_and_half_close(d.port, "POST", "/v1/completions",
                            {"prompt": "q", "max_tokens": 5, "stream": True},
                            [("X-Session-Id", "hc-q")], half_close=False)
    s.settimeout(30)
    assert s.recv(65536).startswith(b"HTTP/1.1 200")  # queued: headers only
    s.close()  # a plain close: the FIN, then a reset for the ping that follows it
    log = d.wait_log(lambda o: o.get("session") == "hc-q" and o.get("event") == "request",
                     timeout=10)
    assert log["client_gone"] is True and log["tokens_out"] == 0
    assert X.metric(d.port, "xlserve_running") == 1  # the blocker still holds the slot
    blocker.close()


def test_non_stream_generation_of_a_half_closed_client_is_cancelled(start_daemon, medium_model):
    """The documented choice: the FIN of a client waiting for a non-streamed generation cannot be
    told from its leaving, so the generation stops (within a decode step) and the connection is
    closed without a reply, instead of running to max_tokens for nobody."""
    d = start_daemon(medium_model, "--max-tokens-limit", "10000000")
    s = send_and_half_close(d.port, "POST", "/v1/completions",
                            {"prompt": "x", "max_tokens": 10000000},
                            [("X-Session-Id", "hc-3")])
    got = read_all(s)
    assert got == b""
    log = d.wait_log(lambda o: o.get("session") == "hc-3" and o.get("event") == "request")
    assert log["finish"] == "cancelled" and log["client_gone"] is True
    st, sess = X.get_session(d.port, "hc-3")
    assert st == 200 and sess["busy"] is False


def test_immediate_answers_reach_a_half_closed_client(start_daemon, tiny_model):
    d = start_daemon(tiny_model)
    got = read_all(send_and_half_close(d.port, "GET", "/health"))
    assert got.startswith(b"HTTP/1.1 200") and b'"ok"' in got
    got = read_all(send_and_half_close(d.port, "POST", "/v1/completions", {"prompt": 5}))
    assert got.startswith(b"HTTP/1.1 400") and b"invalid_value" in got


def test_pipelined_requests_of_a_half_closed_client_are_all_answered(start_daemon, tiny_model):
    """The connection ends once the last of them is answered (not at idle_timeout)."""
    d = start_daemon(tiny_model)
    s = socket.create_connection(("127.0.0.1", d.port), timeout=30)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 3)
    s.shutdown(socket.SHUT_WR)
    t0 = time.monotonic()
    got = read_all(s)
    assert got.count(b"HTTP/1.1 200") == 3 and time.monotonic() - t0 < 5

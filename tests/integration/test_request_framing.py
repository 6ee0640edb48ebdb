"""Request heads that a proxy in front could read differently from the daemon (request
smuggling) or that would cut a path short: each gets 400 `malformed_request`, the connection is
closed after it, and nothing sent behind it on the same connection is answered. Raw sockets on
loopback, since an HTTP client library would not send these."""
import json
import socket

import pytest

import xlharness as X

BODY = b'{"prompt": "a", "max_tokens": 1}'
SMUGGLED = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


def exchange(port, data, timeout=10):
    """Sends data, reads until the daemon closes; returns the list of (status, body) of the
    responses received (Content-Length framed, as the daemon sends them)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    got = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        got += chunk
    s.close()
    out = []
    while got.startswith(b"HTTP/1.1 "):
        head, _, rest = got.partition(b"\r\n\r\n")
        status = int(head[9:12])
        n = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                n = int(v)
        out.append((status, rest[:n]))
        got = rest[n:]
    return out


def post(path, headers, body=BODY, version=b"HTTP/1.1"):
    head = b"POST " + path + b" " + version + b"\r\nHost: x\r\nContent-Type: application/json\r\n"
    return head + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body


CL = b"Content-Length: %d" % len(BODY)
CHUNKED_BODY = b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)

MALFORMED = {
    "two different Content-Length": post(b"/v1/completions", [CL, b"Content-Length: 5"]),
    "the same Content-Length twice": post(b"/v1/completions", [CL, CL]),
    "Content-Length and Transfer-Encoding": post(
        b"/v1/completions", [CL, b"Transfer-Encoding: chunked"], CHUNKED_BODY),
    "Transfer-Encoding and Content-Length": post(
        b"/v1/completions", [b"Transfer-Encoding: chunked", CL], CHUNKED_BODY),
    "Transfer-Encoding twice": post(
        b"/v1/completions", [b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"],
        CHUNKED_BODY),
    "Transfer-Encoding: gzip, chunked": post(
        b"/v1/completions", [b"Transfer-Encoding: gzip, chunked"], CHUNKED_BODY),
    "Transfer-Encoding: xchunked": post(
        b"/v1/completions", [b"Transfer-Encoding: xchunked"], CHUNKED_BODY),
    "Transfer-Encoding in HTTP/1.0": post(
        b"/v1/completions", [b"Transfer-Encoding: chunked"], CHUNKED_BODY, b"HTTP/1.0"),
    "space before the colon": post(b"/v1/completions", [b"Content-Length : %d" % len(BODY)]),
    "two Host headers": post(b"/v1/completions", [CL, b"Host: y"]),
    # obs-fold: a proxy that unfolds reads "Transfer-Encoding: chunked" (and the body as chunks);
    # MHD appends the folded line to the header's name and would read the body as a request
    "Transfer-Encoding folded": post(b"/v1/completions", [b"Transfer-Encoding:", b" chunked"],
                                     CHUNKED_BODY),
    "Content-Length folded": post(b"/v1/completions", [b"Content-Length:", b" %d" % len(BODY)]),
    "a folded line that carries a header": post(
        b"/v1/completions", [b"X-A: a", b" Transfer-Encoding: chunked", CL]),
    "%00 in the path": b"GET /health%00junk HTTP/1.1\r\nHost: x\r\n\r\n",
    "%00 in a query argument": b"GET /v1/sessions?limit=1%00 HTTP/1.1\r\nHost: x\r\n\r\n",
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_head_gets_400_and_the_connection_ends(daemon, name):
    got = exchange(daemon.port, MALFORMED[name] + SMUGGLED)
    assert len(got) == 1, (name, got)  # the request behind it is never answered
    status, body = got[0]
    assert status == 400, (name, got)
    err = json.loads(body)["error"]
    assert err["code"] == "malformed_request" and err["type"] == "invalid_request_error"
    assert err["message"]


def test_nul_in_a_session_path_does_not_reach_another_session(daemon):
    """DELETE /v1/sessions/zz%00junk once deleted session zz (the path was cut at the NUL)."""
    X.complete(daemon.port, "zz", prompt="keep me", max_tokens=1)
    got = exchange(daemon.port, b"DELETE /v1/sessions/zz%00junk HTTP/1.1\r\nHost: x\r\n\r\n")
    assert [g[0] for g in got] == [400]
    st, s = X.get_session(daemon.port, "zz")
    assert st == 200 and s["tokens"] > 0


def test_well_formed_framing_still_works(daemon):
    """The same shapes without the ambiguity are served, and a kept-alive connection goes on."""
    ok_cl = post(b"/v1/completions", [CL])
    ok_chunked = post(b"/v1/completions", [b"Transfer-Encoding: chunked"], CHUNKED_BODY)
    got = exchange(daemon.port, ok_cl + ok_chunked + SMUGGLED.replace(
        b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
    assert [g[0] for g in got] == [200, 200, 200], got
    # an escaped percent sign is not a NUL byte
    got = exchange(daemon.port, b"GET /v1/sessions/zz%2500 HTTP/1.1\r\nHost: x\r\n"
                                b"Connection: close\r\n\r\n")
    assert got and json.loads(got[0][1])["error"]["code"] != "malformed_request"

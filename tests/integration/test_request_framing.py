"""Request heads that a proxy in front could read differently from the daemon (request
smuggling) or that would cut a path short: each gets 400 `malformed_request`, the connection is
closed after it, and nothing sent behind it on the same connection is answered. Raw sockets on
loopback, since an HTTP client library would not send these."""
import json

import pytest

import xlharness as X
from rawhttp import exchange, responses, send_raw, status_codes

BODY = b'{"prompt": "a", "max_tokens": 1}'
SMUGGLED = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


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
    # raw NUL bytes: MHD hands out C strings, so what follows one would vanish
    "raw NUL in the path": b"GET /health\0x HTTP/1.1\r\nHost: x\r\n\r\n",
    "raw NUL at the end of the path": b"GET /health\0 HTTP/1.1\r\nHost: x\r\n\r\n",
    "raw NUL in a query": b"GET /v1/sessions?limit=1\0junk HTTP/1.1\r\nHost: x\r\n\r\n",
    "raw NUL in the method": b"GE\0T /health HTTP/1.1\r\nHost: x\r\n\r\n",
    "raw NUL before the path": b"GET \0/health HTTP/1.1\r\nHost: x\r\n\r\n",
    "raw NUL in a header value": b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n",
    "raw NUL ending a header value": b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\0\r\n\r\n",
    "raw NUL in the Host value": b"GET /health HTTP/1.1\r\nHost: x\0y\r\n\r\n",
    "raw NUL after the colon": b"GET /health HTTP/1.1\r\nHost: x\r\nX-A:\0b\r\n\r\n",
    "raw NUL in Content-Length": post(b"/v1/completions", [CL + b"\0" + b"0"]),
    "raw NUL in the last header": b"GET /health HTTP/1.1\r\nX-A: b\r\nHost: x\0z\r\n\r\n",
    "HTTP/1.1 without Host": b"GET /health HTTP/1.1\r\n\r\n",
    "HTTP/1.1 without Host, with headers": b"GET /health HTTP/1.1\r\nX-A: b\r\n\r\n",
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


def test_raw_nul_in_a_session_path_does_not_reach_another_session(daemon):
    """GET /v1/sessions/abc<NUL>def once answered for session abc (the path was cut)."""
    X.complete(daemon.port, "abc", prompt="keep me", max_tokens=1)
    for method in (b"GET", b"DELETE"):
        got = exchange(daemon.port, method + b" /v1/sessions/abc\0def HTTP/1.1\r\nHost: x\r\n\r\n")
        assert [g[0] for g in got] == [400], got
        assert json.loads(got[0][1])["error"]["code"] == "malformed_request"
    st, s = X.get_session(daemon.port, "abc")
    assert st == 200 and s["tokens"] > 0


def test_heads_that_only_look_unusual_are_served(daemon):
    """The NUL check reads MHD's buffer between the pieces it parsed: what MHD legitimately
    leaves there (bare LF line ends, several spaces after the method, spaces or tabs after a
    colon, empty values, HTTP/1.0 without Host, a query) must not count as a NUL."""
    heads = [
        b"GET /health HTTP/1.1\nHost: x\nConnection: close\n\n",
        b"GET   /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /health?a=1&b=%20 HTTP/1.1\r\nHost:\t x\r\nX-E:\r\nX-F: f  \r\n"
        b"Connection: close\r\n\r\n",
        b"GET /health HTTP/1.0\r\n\r\n",
        b"GET /health HTTP/1.0\r\nX-A: a\r\n\r\n",
        post(b"/v1/completions", [CL, b"Connection: close"]),
        # an unknown header folded over two lines (MHD moves the joined value out of its
        # buffer): ignored, as before
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\nConnection: close\r\n\r\n",
    ]
    for h in heads:
        got = exchange(daemon.port, h)
        assert [g[0] for g in got] == [200], (h, got)


# Content-Length values libmicrohttpd 0.9.75 refuses while it parses the head, before the
# access handler runs (it would write its reply's header block twice): (value, status, code)
BAD_CONTENT_LENGTH = [
    (b"-1", 400, "invalid_content_length"),
    (b"+29", 400, "invalid_content_length"),
    (b"29, 29", 400, "invalid_content_length"),
    (b"29 29", 400, "invalid_content_length"),
    (b"1x", 400, "invalid_content_length"),
    (b"0x1d", 400, "invalid_content_length"),
    (b"", 400, "invalid_content_length"),
    (b"29 ", 400, "invalid_content_length"),  # MHD keeps trailing blanks in the value
    (b"99999999999999999999999", 413, "body_too_large"),  # over 2^64 - 1
]


def bad_cl_request(value):
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + value + b"\r\n\r\n" + BODY)


def assert_one_error_reply(got, status, code):
    """Exactly one status line in everything received, a well-formed reply with the API's
    error body, and the connection closed after it (send_raw read until the close)."""
    assert status_codes(got) == [status], got
    (st, headers, body), = responses(got)
    assert st == status and headers["connection"] == "close", got
    assert headers["content-type"] == "application/json", got
    assert got.endswith(body) and len(body) == int(headers["content-length"]), got
    err = json.loads(body)["error"]
    assert err["code"] == code and err["type"] == "invalid_request_error", err
    assert "Content-Length" in err["message"], err


@pytest.mark.parametrize("value,status,code", BAD_CONTENT_LENGTH,
                         ids=[v.decode() or "empty" for v, _, _ in BAD_CONTENT_LENGTH])
def test_malformed_content_length_gets_one_reply(daemon, value, status, code):
    """libmicrohttpd 0.9.75 answers these itself (with its header block written twice); the
    daemon answers them first, once, and nothing sent behind it is served."""
    counted = 'xlserve_requests_total{route="other",status="%d"}' % status
    before = X.metrics(daemon.port).get(counted, 0)
    got = send_raw(daemon.port, bad_cl_request(value) + SMUGGLED)
    assert_one_error_reply(got, status, code)
    assert X.metrics(daemon.port)[counted] == before + 1
    assert exchange(daemon.port, SMUGGLED.replace(
        b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))[0][0] == 200  # still serving


@pytest.mark.parametrize("split", ["after the request line", "inside Content-Length",
                                   "before the empty line", "byte by byte"])
def test_malformed_content_length_in_pieces_gets_one_reply(daemon, split):
    """The head arrives over several TCP segments: MHD saw the request line (and ran the
    daemon's URI callback) reads earlier than the Content-Length line or the head's end."""
    data = bad_cl_request(b"-1")
    cut = {"after the request line": [data.index(b"\r\n") + 2],
           "inside Content-Length": [data.index(b"Content-Length") + 11],
           "before the empty line": [data.index(b"\r\n\r\n") + 2]}
    if split == "byte by byte":
        head_end = data.index(b"\r\n\r\n") + 4
        pieces = [data[i:i + 1] for i in range(head_end)] + [data[head_end:]]
    else:
        at = [0] + cut[split] + [len(data)]
        pieces = [data[a:b] for a, b in zip(at, at[1:])]
    got = send_raw(daemon.port, pieces, pause=0.05 if len(pieces) < 10 else 0.002)
    assert_one_error_reply(got, 400, "invalid_content_length")


def test_malformed_content_length_on_a_kept_alive_connection(daemon):
    """The second request of a connection: the first is served, the second refused once."""
    got = send_raw(daemon.port, SMUGGLED + bad_cl_request(b"+29"))
    assert status_codes(got) == [200, 400], got
    first = responses(got)[0]
    assert_one_error_reply(got[got.index(first[2]) + len(first[2]):], 400,
                           "invalid_content_length")


def test_content_length_next_to_transfer_encoding_stays_malformed_request(daemon):
    """With Transfer-Encoding, libmicrohttpd ignores Content-Length and the daemon's own check
    refuses the pair (malformed_request), whatever the Content-Length value."""
    got = exchange(daemon.port, post(b"/v1/completions", [b"Transfer-Encoding: chunked",
                                                           b"Content-Length: -1"], CHUNKED_BODY))
    assert len(got) == 1 and got[0][0] == 400, got
    assert json.loads(got[0][1])["error"]["code"] == "malformed_request"


@pytest.mark.parametrize("pieces", [1, 7])
def test_raw_nul_check_on_large_heads_in_pieces(daemon, pieces):
    """Heads of up to 40 KB, arriving whole or in pieces (MHD grows its read buffer): a
    well-formed one is served, one with a NUL in its last header is refused; on a kept-alive
    connection the second request's head is checked too."""
    pad = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 1000) for i in range(40))
    ok = b"GET /health HTTP/1.1\r\nHost: x\r\n" + pad
    for head, want in [(ok + b"Connection: close\r\n\r\n", [200]),
                       (ok + b"X-Z: a\0b\r\n\r\n", [400]),
                       (ok + b"\r\n" + b"GET /health\0x HTTP/1.1\r\nHost: x\r\n\r\n", [200, 400])]:
        step = -(-len(head) // pieces)
        got = send_raw(daemon.port, [head[i:i + step] for i in range(0, len(head), step)])
        statuses = status_codes(got)
        assert statuses == want, (want, got[:300])

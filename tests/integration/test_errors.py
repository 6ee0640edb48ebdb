"""The bad-input table: each request gets its documented status and an OpenAI-shaped error body
naming the field; the server keeps serving and no session is harmed."""
import http.client
import json
import socket
import time

import pytest

import xlharness as X

C = "/v1/completions"
CH = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]

# (path, body (dict, or bytes sent raw), status, code, param)
CASES = [
    (C, b"{not json", 400, "invalid_json", None),
    (C, b"", 400, "invalid_json", None),
    (C, b"[1, 2]", 400, "invalid_json", None),
    (C, b'{"prompt": "a", "prompt": "b"}', 400, "invalid_json", None),
    (C, b'{"prompt": "\xff\xfe"}', 400, "invalid_json", None),
    (C, b'{"prompt": "a\\u0000b"}', 400, "invalid_json", None),
    (C, b'{"prompt": "a", "max_tokens": 1e400}', 400, "invalid_json", None),
    (C, b'{"prompt": "a", "max_tokens": 123456789012345678901234567890}', 400, "invalid_json", None),
    (C, {"prompt": 5}, 400, "invalid_value", "prompt"),
    (C, {"prompt": ["a", "b"]}, 400, "invalid_value", "prompt"),
    (C, {"prompt": [1, 256]}, 400, "invalid_value", "prompt"),
    (C, {"prompt": [1, -1]}, 400, "invalid_value", "prompt"),
    (C, {"prompt": "a", "max_tokens": -1}, 400, "invalid_value", "max_tokens"),
    (C, {"prompt": "a", "max_tokens": "5"}, 400, "invalid_value", "max_tokens"),
    (C, {"prompt": "a", "max_tokens": 5.5}, 400, "invalid_value", "max_tokens"),
    (C, {"prompt": "a", "max_tokens": 10 ** 12}, 400, "invalid_value", "max_tokens"),
    (C, {"prompt": "a", "temperature": -0.1}, 400, "invalid_value", "temperature"),
    (C, {"prompt": "a", "temperature": 2.5}, 400, "invalid_value", "temperature"),
    (C, {"prompt": "a", "temperature": "hot"}, 400, "invalid_value", "temperature"),
    (C, {"prompt": "a", "top_p": 0}, 400, "invalid_value", "top_p"),
    (C, {"prompt": "a", "top_p": 1.5}, 400, "invalid_value", "top_p"),
    (C, {"prompt": "a", "top_k": -3}, 400, "invalid_value", "top_k"),
    (C, {"prompt": "a", "top_k": 100000}, 400, "invalid_value", "top_k"),
    (C, {"prompt": "a", "min_p": 2}, 400, "invalid_value", "min_p"),
    (C, {"prompt": "a", "presence_penalty": 3}, 400, "invalid_value", "presence_penalty"),
    (C, {"prompt": "a", "frequency_penalty": -3}, 400, "invalid_value", "frequency_penalty"),
    (C, {"prompt": "a", "repetition_penalty": 0}, 400, "invalid_value", "repetition_penalty"),
    (C, {"prompt": "a", "seed": "x"}, 400, "invalid_value", "seed"),
    (C, {"prompt": "a", "seed": 1.5}, 400, "invalid_value", "seed"),
    (C, {"prompt": "a", "stop": 7}, 400, "invalid_value", "stop"),
    (C, {"prompt": "a", "stop": [""]}, 400, "invalid_value", "stop"),
    (C, {"prompt": "a", "stop": ["x" * 300]}, 400, "invalid_value", "stop"),
    (C, {"prompt": "a", "stop": ["a"] * 17}, 400, "invalid_value", "stop"),
    (C, {"prompt": "a", "stream": "yes"}, 400, "invalid_value", "stream"),
    (C, {"prompt": "a", "stream_options": {"include_usage": True}}, 400, "invalid_value",
     "stream_options"),
    (C, {"prompt": "a", "stream": True, "stream_options": {"include_usage": 1}}, 400,
     "invalid_value", "include_usage"),
    (C, {"prompt": "a", "logprobs": 21}, 400, "invalid_value", "logprobs"),
    (C, {"prompt": "a", "logprobs": True}, 400, "invalid_value", "logprobs"),
    (C, {"prompt": "a", "n": 17}, 400, "invalid_value", "n"),
    (C, {"prompt": "a", "best_of": 17}, 400, "invalid_value", "best_of"),
    (C, {"prompt": "a", "echo": True, "stream": True}, 400, "invalid_value", "echo"),
    (C, {"prompt": "a", "suffix": "z"}, 400, "invalid_value", "suffix"),
    (C, {"prompt": "a", "logit_bias": {"5": 101}}, 400, "invalid_value", "logit_bias"),
    (C, {"prompt": "a", "logit_bias": {"5": "1"}}, 400, "invalid_value", "logit_bias"),
    (C, {"prompt": "a", "logit_bias": {"x5": 1}}, 400, "invalid_value", "logit_bias"),
    (C, {"prompt": "a", "logit_bias": {"-1": 1}}, 400, "invalid_value", "logit_bias"),
    (C, {"prompt": "a", "logit_bias": {"100000": 1}}, 400, "invalid_value", "logit_bias"),
    (C, {"prompt": "a", "logit_bias": {"5": 1, "05": 2}}, 400, "invalid_value", "logit_bias"),
    (C, {"prompt": "a", "logit_bias": [5]}, 400, "invalid_value", "logit_bias"),
    (C, {"prompt": "a", "model": 5}, 400, "invalid_value", "model"),
    (C, {"prompt": "a", "session_id": "bad id"}, 400, "invalid_value", "session_id"),
    (C, {"prompt": "a", "session_id": 12}, 400, "invalid_value", "session_id"),
    (C, {"prompt": "a", "session_id": "x" * 129}, 400, "invalid_value", "session_id"),
    (C, {"messages": MSG}, 400, "invalid_value", "messages"),
    (C, {"prompt": "a", "history": "full"}, 400, "invalid_value", "history"),
    (C, {"prompt": "", "max_tokens": 3}, 400, "empty_prompt", "prompt"),
    (CH, {}, 400, "invalid_value", "messages"),
    (CH, {"messages": []}, 400, "invalid_value", "messages"),
    (CH, {"messages": "hi"}, 400, "invalid_value", "messages"),
    (CH, {"messages": [5]}, 400, "invalid_value", "messages[0]"),
    (CH, {"messages": [{"content": "x"}]}, 400, "invalid_value", "messages[0].role"),
    (CH, {"messages": [{"role": "tool", "content": "x"}]}, 400, "invalid_value",
     "messages[0].tool_call_id"),
    (CH, {"messages": [{"role": "function", "content": "x"}]}, 400, "invalid_value",
     "messages[0].role"),
    (CH, {"messages": [{"role": "user"}]}, 400, "invalid_value", "messages[0].content"),
    (CH, {"messages": [{"role": "user", "content": 3}]}, 400, "invalid_value", "messages[0].content"),
    (CH, {"messages": MSG + [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
     "invalid_value", "messages[1].content"),
    (CH, {"messages": MSG, "logprobs": 1}, 400, "invalid_value", "logprobs"),
    (CH, {"messages": MSG, "top_logprobs": 3}, 400, "invalid_value", "top_logprobs"),
    (CH, {"messages": MSG, "logprobs": True, "top_logprobs": 21}, 400, "invalid_value",
     "top_logprobs"),
    (CH, {"messages": MSG, "max_completion_tokens": -2}, 400, "invalid_value",
     "max_completion_tokens"),
    (CH, {"messages": MSG, "tools": [{"type": "function"}]}, 400, "invalid_value",
     "tools[0].function"),
    (CH, {"messages": MSG, "response_format": {"type": "xml"}}, 400, "invalid_value",
     "response_format"),
    (CH, {"messages": MSG, "history": "sometimes"}, 400, "invalid_value", "history"),
    (CH, {"messages": MSG, "n": 0}, 400, "invalid_value", "n"),
]


@pytest.fixture(scope="module")
def small_daemon(tiny_model):
    d = X.Daemon(tiny_model, ["--max-body-bytes", "4096", "--max-prompt-tokens", "100",
                              "--max-tokens-limit", "1000", "--request-timeout", "2"])
    yield d
    assert d.stop() == 0, d.tail()


def check_error(st, body, status, code, param):
    assert st == status, (st, body)
    e = body["error"]
    assert set(e) == {"message", "type", "param", "code"}
    assert e["code"] == code and e["param"] == param and e["message"]
    assert e["type"] in ("invalid_request_error", "authentication_error", "rate_limit_error",
                         "server_error")


@pytest.mark.parametrize("path,body,status,code,param", CASES)
def test_bad_input(small_daemon, path, body, status, code, param):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    st, h, b = X.request(small_daemon.port, "POST", path, raw,
                         {"Content-Type": "application/json", "X-Session-Id": "victim"})
    check_error(st, json.loads(b), status, code, param)
    assert h["content-type"] == "application/json"


def test_victim_session_untouched_and_server_serving(small_daemon):
    # every bad request above named session "victim": none may have created or fed it
    st, _, b = X.request(small_daemon.port, "GET", "/v1/sessions/victim")
    assert st == 404
    st, _, b = X.post_json(small_daemon.port, C, {"prompt": "ok", "max_tokens": 2})
    assert st == 200


def test_limits(small_daemon):
    p = small_daemon.port
    st, _, b = X.post_json(p, C, {"prompt": "x" * 101})
    check_error(st, b, 422, "prompt_too_long", "prompt")
    st, _, b = X.post_json(p, C, {"prompt": "x" * 5000})  # Content-Length over the limit
    check_error(st, b, 413, "body_too_large", None)
    # a chunked body over the limit (no Content-Length): refused when it ends
    c = http.client.HTTPConnection("127.0.0.1", p, timeout=10)
    c.putrequest("POST", C)
    c.putheader("Transfer-Encoding", "chunked")
    c.putheader("Content-Type", "application/json")
    c.endheaders()
    data = json.dumps({"prompt": "y" * 6000}).encode()
    for i in range(0, len(data), 1000):
        part = data[i:i + 1000]
        c.send(b"%x\r\n%s\r\n" % (len(part), part))
    c.send(b"0\r\n\r\n")
    r = c.getresponse()
    check_error(r.status, json.loads(r.read()), 413, "body_too_large", None)
    c.close()
    # a chunked body within the limit works
    c = http.client.HTTPConnection("127.0.0.1", p, timeout=10)
    c.request("POST", C, body=iter([b'{"prompt": "ab", ', b'"max_tokens": 2}']),
              headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
              encode_chunked=True)
    r = c.getresponse()
    assert r.status == 200 and json.loads(r.read())["usage"]["prompt_tokens"] == 2
    c.close()


def test_routes_methods_headers(small_daemon):
    p = small_daemon.port
    st, h, b = X.request(p, "GET", "/nope")
    check_error(st, json.loads(b), 404, "not_found", None)
    st, h, b = X.request(p, "GET", C)
    check_error(st, json.loads(b), 405, "method_not_allowed", None)
    assert h["allow"] == "POST"
    st, h, b = X.request(p, "DELETE", "/v1/sessions")
    assert st == 405 and "POST" in h["allow"]
    st, h, b = X.request(p, "POST", C, json.dumps({"prompt": "a"}).encode(),
                         {"X-Session-Id": "bad id!"})
    check_error(st, json.loads(b), 400, "invalid_value", "X-Session-Id")
    st, h, b = X.request(p, "POST", C, json.dumps({"prompt": "a", "session_id": "s1"}).encode(),
                         {"X-Session-Id": "s2"})
    check_error(st, json.loads(b), 400, "invalid_value", "session_id")
    st, h, b = X.request(p, "GET", "/v1/sessions/nosuch")
    check_error(st, json.loads(b), 404, "session_not_found", "session_id")


def test_garbage_and_half_requests(small_daemon):
    p = small_daemon.port
    for junk in [b"GARBAGE\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"\x00\x01\x02\r\n\r\n",
                 b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"pro"]:
        s = socket.create_connection(("127.0.0.1", p), timeout=1)
        s.sendall(junk)
        s.shutdown(socket.SHUT_WR)
        try:
            s.recv(4096)
        except OSError:
            pass
        s.close()
    st, _, _ = X.request(p, "GET", "/health")
    assert st == 200


def test_slow_body_is_cut_at_request_timeout(small_daemon):
    """A client that sends headers and part of the body, then stalls, is disconnected after
    request_timeout (2 s here), and the drain is not held up by it."""
    s = socket.create_connection(("127.0.0.1", small_daemon.port), timeout=10)
    t0 = time.monotonic()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro")
    got = s.recv(4096)  # returns b"" when the server closes
    elapsed = time.monotonic() - t0
    s.close()
    assert got == b"" and 1.5 < elapsed < 6, (got, elapsed)
    small_daemon.wait_log(lambda o: o.get("error") == "request_timeout")

"""Auth (Bearer keys from the list and the key file, re-read on SIGHUP), sessions scoped to the
key that created them, X-Request-Id / X-Forwarded-For trusted only from configured proxies,
and the optional path prefix."""
import json
import signal
import time

import xlharness as X


def auth(k):
    return {"Authorization": "Bearer " + k}


def test_keys_and_session_scoping(start_daemon, tiny_model, tmp_path):
    kf = tmp_path / "keys"
    kf.write_text("# keys\nfilekey\n\n")
    d = start_daemon(tiny_model, "--api-keys", "k1, k2", "--api-key-file", str(kf))
    p = d.port
    assert X.request(p, "GET", "/health")[0] == 200          # open
    assert X.request(p, "GET", "/metrics")[0] == 200         # open
    for h in [{}, auth("nope"), {"Authorization": "Basic azE6"}, {"Authorization": "Bearer"}]:
        st, hdr, b = X.request(p, "GET", "/v1/models", headers=h)
        e = json.loads(b)["error"]
        assert st == 401 and e["type"] == "authentication_error" and e["code"] == "invalid_api_key"
        assert hdr["www-authenticate"] == "Bearer"
    for k in ["k1", "k2", "filekey"]:
        assert X.request(p, "GET", "/v1/models", headers=auth(k))[0] == 200
    # a session belongs to the key that created it; ids are per key (test_session_keys.py)
    st, _, b = X.post_json(p, "/v1/completions", {"prompt": "mine", "max_tokens": 2},
                           {**auth("k1"), "X-Session-Id": "owned"})
    assert st == 200
    st, _, b = X.request(p, "GET", "/v1/sessions/owned", headers=auth("k2"))
    assert st == 404 and json.loads(b)["error"]["code"] == "session_not_found"
    assert X.request(p, "DELETE", "/v1/sessions/owned", headers=auth("k2"))[0] == 404
    assert X.request(p, "POST", "/v1/sessions/owned/fork", headers=auth("k2"))[0] == 404
    st, _, b = X.request(p, "GET", "/v1/sessions", headers=auth("k2"))
    assert json.loads(b)["data"] == []
    st, _, b = X.post_json(p, "/v1/completions", {"prompt": "other", "max_tokens": 2},
                           {**auth("k2"), "X-Session-Id": "owned"})
    assert st == 200 and b["xlserve"]["session_tokens"] == 7  # k2's own "owned"
    st, _, b = X.request(p, "GET", "/v1/sessions/owned", headers=auth("k1"))
    assert st == 200 and json.loads(b)["tokens"] == 6
    # SIGHUP re-reads the key file
    kf.write_text("newkey\n")
    d.signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if X.request(p, "GET", "/v1/models", headers=auth("newkey"))[0] == 200:
            break
        time.sleep(0.05)
    assert X.request(p, "GET", "/v1/models", headers=auth("newkey"))[0] == 200
    assert X.request(p, "GET", "/v1/models", headers=auth("filekey"))[0] == 401
    assert X.request(p, "GET", "/v1/models", headers=auth("k1"))[0] == 200


def test_trusted_proxy_headers_and_prefix(start_daemon, tiny_model):
    d = start_daemon(tiny_model, "--trusted-proxies", "127.0.0.1", "--path-prefix", "/xl", prefix="/xl")
    p = d.port
    st, h, b = X.request(p, "GET", "/xl/health", headers={
        "X-Request-Id": "req-from-proxy", "X-Forwarded-For": "203.0.113.9, 127.0.0.1"})
    assert st == 200 and h["x-request-id"] == "req-from-proxy"
    log = d.wait_log(lambda o: o.get("request_id") == "req-from-proxy")
    assert log["remote"] == "203.0.113.9"
    assert X.request(p, "GET", "/health")[0] == 404
    assert X.request(p, "GET", "/xlhealth")[0] == 404
    st, _, b = X.post_json(p, "/xl/v1/completions", {"prompt": "a", "max_tokens": 1})
    assert st == 200
    # a header value that is not a plain token is not trusted
    st, h, _ = X.request(p, "GET", "/xl/health", headers={"X-Request-Id": "bad id"})
    assert h["x-request-id"] != "bad id"


def test_untrusted_peer_headers_are_ignored(daemon):
    st, h, _ = X.request(daemon.port, "GET", "/health", headers={
        "X-Request-Id": "spoofed", "X-Forwarded-For": "198.51.100.7"})
    assert h["x-request-id"] != "spoofed"
    log = daemon.wait_log(lambda o: o.get("request_id") == h["x-request-id"])
    assert log["remote"] == "127.0.0.1"

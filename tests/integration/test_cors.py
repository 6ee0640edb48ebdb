"""CORS (the cors_origins option): off by default (no header at all); with a list of origins or
*, every response to an allowed origin carries Access-Control-Allow-Origin, errors and SSE
streams included; a preflight (OPTIONS) is answered 204 without an API key, with the route's
methods and the asked-for headers; an origin not on the list gets no grant."""
import pytest

import xlharness as X

SITE, OTHER = "https://chat.example.com", "https://evil.example.net"


def test_off_by_default(daemon):
    st, h, _ = X.request(daemon.port, "GET", "/v1/models", headers={"Origin": SITE})
    assert st == 200 and not any(k.startswith("access-control-") for k in h)
    st, h, _ = X.request(daemon.port, "OPTIONS", "/v1/chat/completions",
                         headers={"Origin": SITE, "Access-Control-Request-Method": "POST"})
    assert st == 204 and h["allow"] == "POST, OPTIONS"
    assert not any(k.startswith("access-control-") for k in h)


def test_listed_origins(start_daemon, tiny_model):
    d = start_daemon(tiny_model, "--cors-origins", SITE + ", http://localhost:3000",
                     "--api-keys", "k1")
    key = {"Authorization": "Bearer k1"}
    # preflight: no key needed, the route's methods, the asked-for headers echoed
    st, h, body = X.request(d.port, "OPTIONS", "/v1/chat/completions",
                            headers={"Origin": SITE, "Access-Control-Request-Method": "POST",
                                     "Access-Control-Request-Headers": "authorization, content-type"})
    assert st == 204 and body == b""
    assert h["access-control-allow-origin"] == SITE and h["vary"] == "Origin"
    assert h["access-control-allow-methods"] == "POST, OPTIONS"
    assert h["access-control-allow-headers"] == "authorization, content-type"
    assert int(h["access-control-max-age"]) > 0
    # an ordinary response, an error (401 without the key, 404, 400) and a stream
    for method, path, body, hdrs, want in [
            ("POST", "/v1/completions", {"prompt": "a", "max_tokens": 1}, key, 200),
            ("POST", "/v1/completions", {"prompt": "a", "max_tokens": 1}, {}, 401),
            ("GET", "/nowhere", None, key, 404),
            ("POST", "/v1/completions", {"prompt": "a", "n_predict": 1}, key, 400),
            ("GET", "/health", None, {}, 200)]:
        st, h, _ = X.request(d.port, method, path, body, headers=dict(hdrs, Origin=SITE))
        assert st == want and h["access-control-allow-origin"] == SITE, (path, st, h)
        assert "X-Request-Id" in h["access-control-expose-headers"]
    st, h, events = X.stream(d.port, "/v1/completions",
                             {"prompt": "a", "max_tokens": 3, "stream": True},
                             headers=dict(key, Origin="http://localhost:3000"))
    assert st == 200 and h["content-type"] == "text/event-stream"
    assert h["access-control-allow-origin"] == "http://localhost:3000"
    assert events[-1][1] == "[DONE]" and len(X.sse_json(events)) >= 2
    # another origin: no grant (the browser blocks it), the request itself still served
    st, h, _ = X.request(d.port, "OPTIONS", "/v1/completions",
                         headers={"Origin": OTHER, "Access-Control-Request-Method": "POST"})
    assert st == 204 and "access-control-allow-origin" not in h
    st, h, _ = X.request(d.port, "GET", "/v1/models", headers=dict(key, Origin=OTHER))
    assert st == 200 and "access-control-allow-origin" not in h and h["vary"] == "Origin"


def test_any_origin(start_daemon, tiny_model):
    d = start_daemon(tiny_model, "--cors-origins", "*")
    st, h, _ = X.request(d.port, "OPTIONS", "/v1/sessions/abc",
                         headers={"Origin": OTHER, "Access-Control-Request-Method": "DELETE"})
    assert st == 204 and h["access-control-allow-origin"] == "*"
    assert h["access-control-allow-methods"] == "GET, HEAD, DELETE, OPTIONS"
    assert "Authorization" in h["access-control-allow-headers"]
    st, h, _ = X.request(d.port, "POST", "/v1/completions", {"prompt": "", "max_tokens": 1},
                         headers={"Origin": OTHER})
    assert st == 400 and h["access-control-allow-origin"] == "*"
    st, h, _ = X.request(d.port, "GET", "/v1/models")  # not a CORS request: no header
    assert "access-control-allow-origin" not in h


@pytest.mark.parametrize("bad", ["chat.example.com", "https://a.com/path", "ftp://x", "https://"])
def test_bad_origin_option_refused(tiny_model, bad):
    import subprocess
    r = subprocess.run([X.xlserve_bin(), "serve", "--model", tiny_model, "--port", "0",
                        "--cors-origins", bad], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "cors_origins" in r.stderr and bad in r.stderr

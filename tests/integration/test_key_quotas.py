"""Per-key quotas over real HTTP on loopback: one API key can neither evict another key's
sessions nor starve its generations.

- the RAM budget evicts from the key over its fair share first: key k2's 700 session-creating
  requests leave key k1's session in RAM, answering (without the fair share it was evicted:
  404 session_expired);
- session_ram_mb_per_key: a key over it loses its own least-recently-used sessions, whatever the
  budget;
- max_sessions_per_key and max_running_per_key: one more gets 429 quota_exceeded naming the
  limit, and the other key is served.
Each test prints its figures (pytest -s)."""
import http.client
import json
import threading
import time

import xlharness as X

K1 = {"Authorization": "Bearer k1"}
K2 = {"Authorization": "Bearer k2"}
KEYS = ("--api-keys", "k1,k2")


def flood(port, key, n, threads=4, prefix="k2-"):
    """n zero-token session-creating completions of key (ids prefix + i) on `threads` kept-alive
    connections; returns the statuses."""
    statuses = []
    lock = threading.Lock()

    def run(t):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for i in range(t, n, threads):
            body = json.dumps({"prompt": "", "max_tokens": 0}).encode()
            c.request("POST", "/v1/completions", body=body,
                      headers={**key, "Content-Type": "application/json",
                               "X-Session-Id": "%s%d" % (prefix, i)})
            r = c.getresponse()
            r.read()
            with lock:
                statuses.append(r.status)
        c.close()

    ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return statuses


def error_of(body):
    return json.loads(body)["error"]


def test_one_key_cannot_evict_another(tiny_model, start_daemon):
    # 1 MiB holds about 30 sessions of the tiny model (about 33 KB each)
    d = start_daemon(tiny_model, *KEYS, "--session-ram-mb", "1")
    first = X.complete(d.port, "mine", headers=K1, prompt="hello there", max_tokens=4,
                       temperature=0)
    st, before = X.get_session(d.port, "mine", headers=K1)
    assert st == 200
    t0 = time.monotonic()
    statuses = flood(d.port, K2, 700)
    took = time.monotonic() - t0
    assert statuses.count(200) == 700, sorted(set(statuses))
    ram = X.metric(d.port, "xlserve_session_ram_bytes")
    in_ram = X.metric(d.port, "xlserve_sessions_in_ram")
    st, after = X.get_session(d.port, "mine", headers=K1)
    print("\n700 session-creating requests of k2 in %.2f s; sessions in RAM %d (%.0f KiB of "
          "1024); k1's session: %d" % (took, in_ram, ram / 1024, st))
    assert st == 200, after  # was 404 session_expired: k2's sessions pushed it out
    assert after["tokens"] == before["tokens"]
    # it answers, continuing its own memory
    more = X.complete(d.port, "mine", headers=K1, prompt=" again", max_tokens=2, temperature=0)
    st, now = X.get_session(d.port, "mine", headers=K1)
    assert now["tokens"] == before["tokens"] + len(" again") + 2
    assert first["id"] != more["id"]
    # the key over its share paid: its oldest sessions left RAM (no store: gone for good)
    st, _, b = X.request(d.port, "GET", "/v1/sessions/k2-0", headers=K2)
    assert st == 404 and error_of(b)["code"] == "session_expired", b
    assert ram <= 1 << 20


def test_session_ram_per_key_caps_one_key(tiny_model, start_daemon):
    d = start_daemon(tiny_model, *KEYS, "--session-ram-mb", "64", "--session-ram-mb-per-key", "1")
    X.complete(d.port, "mine", headers=K1, prompt="hello", max_tokens=2)
    statuses = flood(d.port, K2, 100)
    assert statuses.count(200) == 100
    # the flood's four connections finish in any order: the newest session is made after them
    assert flood(d.port, K2, 1, threads=1, prefix="k2-last") == [200]
    in_ram = X.metric(d.port, "xlserve_sessions_in_ram")
    ram = X.metric(d.port, "xlserve_session_ram_bytes")
    print("\nsession_ram_mb_per_key 1: k2 made 101 sessions; %d in RAM (%.0f KiB)" % (
        in_ram, ram / 1024))
    # far under the 64 MiB budget, yet k2 holds at most its 1 MiB
    assert ram <= (1 << 20) + 64 * 1024
    assert in_ram < 100
    st, _, b = X.request(d.port, "GET", "/v1/sessions/k2-0", headers=K2)
    assert st == 404 and error_of(b)["code"] == "session_expired", b
    st, _, b = X.request(d.port, "GET", "/v1/sessions/k2-last0", headers=K2)
    assert st == 200, b
    assert X.get_session(d.port, "mine", headers=K1)[0] == 200


def test_max_sessions_per_key(tiny_model, start_daemon):
    d = start_daemon(tiny_model, *KEYS, "--max-sessions-per-key", "3")
    assert flood(d.port, K2, 2, threads=1) == [200, 200]
    st, _, b = X.request(d.port, "POST", "/v1/sessions", headers=K2)
    assert st == 201, b
    refused = []
    # a turn naming a new id, POST /v1/sessions, a fork, an import: each would add a session
    st, h, b = X.post_json(d.port, "/v1/completions", {"prompt": "x", "max_tokens": 1},
                           headers={**K2, "X-Session-Id": "one-more"})
    refused.append((st, b["error"]["code"]))
    assert "max_sessions_per_key" in b["error"]["message"], b
    st, _, b = X.request(d.port, "POST", "/v1/sessions", headers=K2)
    refused.append((st, error_of(b)["code"]))
    st, _, b = X.request(d.port, "POST", "/v1/sessions/k2-0/fork", headers=K2)
    refused.append((st, error_of(b)["code"]))
    st, _, state = X.request(d.port, "GET", "/v1/sessions/k2-0/state", headers=K2)
    assert st == 200
    st, _, b = X.request(d.port, "PUT", "/v1/sessions/copy/state", body=state,
                         headers={**K2, "Content-Type": "application/octet-stream"})
    refused.append((st, error_of(b)["code"]))
    print("\nmax_sessions_per_key 3, a 4th session: %s" % refused)
    assert refused == [(429, "quota_exceeded")] * 4
    # a turn in a session it holds, and another key, are served
    X.complete(d.port, "k2-0", headers=K2, prompt="ok", max_tokens=1)
    X.complete(d.port, "k1-session", headers=K1, prompt="ok", max_tokens=1)
    # deleting one makes room
    st, _, _ = X.request(d.port, "DELETE", "/v1/sessions/k2-1", headers=K2)
    assert st in (200, 204)
    X.complete(d.port, "one-more", headers=K2, prompt="ok", max_tokens=1)


def open_stream(port, key, max_tokens=4096):
    """A stream of key that is left unread; returns the connection and its response."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v1/completions",
              body=json.dumps({"prompt": "hello", "max_tokens": max_tokens,
                               "stream": True}).encode(),
              headers={**key, "Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    return c, r


def test_max_running_per_key(medium_model, start_daemon):
    d = start_daemon(medium_model, *KEYS, "--max-running-per-key", "2")
    held = [open_stream(d.port, K2) for _ in range(2)]
    st, h, b = X.post_json(d.port, "/v1/completions", {"prompt": "x", "max_tokens": 1},
                           headers=K2)
    print("\nmax_running_per_key 2, k2's third request: %d %s" % (st, b["error"]))
    assert st == 429 and b["error"]["code"] == "quota_exceeded", b
    assert b["error"]["type"] == "rate_limit_error"
    assert "max_running_per_key" in b["error"]["message"]
    assert h.get("retry-after") == "1"
    t0 = time.monotonic()
    X.complete(d.port, headers=K1, prompt="x", max_tokens=4)
    print("k1 answered in %.2f s while k2 holds its limit" % (time.monotonic() - t0))
    for c, _ in held:
        c.close()
    # the cancelled streams give their places back
    X.wait_until(lambda: X.post_json(d.port, "/v1/completions", {"prompt": "x", "max_tokens": 1},
                                     headers=K2)[0] == 200, timeout=30,
                 what="k2 to be served again")

"""Sessions: a turn continues the memory of the previous one exactly; chat requests are told
apart (full history / only new messages / edited history); session endpoints; one request at a
time per session; sessions do not mix under concurrency; eviction and TTL say session_expired;
a fork is a use of its parent (a small budget evicts its forks, never the parent)."""
import json
import subprocess
import threading
import time

import xlharness as X


def chat(port, sid, messages, **body):
    h = {"X-Session-Id": sid} if sid else {}
    st, hdr, b = X.post_json(port, "/v1/chat/completions",
                             dict(messages=messages, temperature=0, **body), headers=h)
    assert st == 200, b
    return hdr, b


def test_second_turn_continues_the_first(daemon, tiny_model, tmp_path):
    """Turn 2 of a session equals one uninterrupted text fed to the engine: same greedy tokens,
    log-probs to 1e-4. Prompts and replies are long enough to wrap the memory (mem_len 64)."""
    p1 = "It is a truth universally acknowledged, that a single man in possession"
    p2 = " of a good fortune, must be in want of a wife."
    a = X.complete(daemon.port, "cont-1", prompt=p1, max_tokens=40, temperature=0, logprobs=0)
    ids1 = X.ids_of(a["choices"][0]["logprobs"]["tokens"])
    assert len(ids1) == 40
    b = X.complete(daemon.port, "cont-1", prompt=p2, max_tokens=40, temperature=0, logprobs=0)
    ref = X.complete(daemon.port, None, prompt=list(p1.encode()) + ids1 + list(p2.encode()),
                   max_tokens=40, temperature=0, logprobs=0)
    assert b["choices"][0]["text"] == ref["choices"][0]["text"]
    for x, y in zip(X.lps(b), X.lps(ref)):
        assert abs(x - y) < 1e-4
    assert b["usage"]["prompt_tokens"] == len(p2)
    # and to the engine's own evaluation of the whole transcript (xlserve eval, segments of 16)
    ids2 = X.ids_of(b["choices"][0]["logprobs"]["tokens"])
    transcript = list(p1.encode()) + ids1 + list(p2.encode()) + ids2
    ids_file, nll_file = tmp_path / "ids.txt", tmp_path / "nll.txt"
    ids_file.write_text(" ".join(map(str, transcript)))
    r = subprocess.run([X.xlserve_bin(), "eval", "--model", tiny_model, "--ids", str(ids_file),
                        "--dump-nll", str(nll_file)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    nll = [float(x) for x in nll_file.read_text().split()]
    assert len(nll) == len(transcript) - 1
    start = len(transcript) - len(ids2)  # nll[i] predicts transcript[i + 1]
    for k, lp in enumerate(X.lps(b)):
        assert abs(lp + nll[start - 1 + k]) < 1e-4, k
    for k, lp in enumerate(X.lps(a)):
        assert abs(lp + nll[len(p1) - 1 + k]) < 1e-4, k
    st, s = X.get_session(daemon.port, "cont-1")
    assert st == 200 and s["tokens"] == len(p1) + 40 + len(p2) + 40
    assert s["memory_positions"] == 64 and s["turns"] == 2 and s["mode"] == "raw"
    assert b["xlserve"]["session_tokens"] == s["tokens"]


def test_empty_prompt_continues_from_pending(daemon):
    a = X.complete(daemon.port, "cont-2", prompt="abc", max_tokens=5, temperature=0, logprobs=0)
    b = X.complete(daemon.port, "cont-2", prompt="", max_tokens=5, temperature=0, logprobs=0)
    ref = X.complete(daemon.port, None, prompt="abc", max_tokens=10, temperature=0)
    assert a["choices"][0]["text"] + b["choices"][0]["text"] == ref["choices"][0]["text"]
    assert b["usage"]["prompt_tokens"] == 0


SYS = {"role": "system", "content": "You are terse."}


def test_chat_full_history_append_and_edit(daemon):
    sid = "chat-1"
    u1 = {"role": "user", "content": "Hello"}
    h, b1 = chat(daemon.port, sid, [SYS, u1], max_tokens=8)
    r1 = b1["choices"][0]["message"]["content"]
    assert b1["usage"]["prompt_tokens"] == len("You are terse.\n\nUser: Hello\nAssistant: ")
    assert b1["xlserve"]["history"] == "new" and "x-session-reset" not in h
    t1 = b1["xlserve"]["session_tokens"]
    assert t1 == b1["usage"]["total_tokens"]

    # full history (what OpenAI clients send): only the new message is fed
    a1 = {"role": "assistant", "content": r1}
    u2 = {"role": "user", "content": "How are you?"}
    h, b2 = chat(daemon.port, sid, [SYS, u1, a1, u2], max_tokens=8, logprobs=True)
    assert b2["xlserve"]["history"] == "full_history"
    assert b2["usage"]["prompt_tokens"] == len("\nUser: How are you?\nAssistant: ")
    assert b2["xlserve"]["session_tokens"] == t1 + b2["usage"]["total_tokens"]
    st, s = X.get_session(daemon.port, sid)
    assert s["tokens"] == b2["xlserve"]["session_tokens"] and s["messages"] == 5

    # the same conversation replayed into a fresh session gives the same reply
    h, ref = chat(daemon.port, "chat-1-replay", [SYS, u1, a1, u2], max_tokens=8, logprobs=True)
    assert ref["xlserve"]["history"] == "new"
    assert ref["choices"][0]["message"]["content"] == b2["choices"][0]["message"]["content"]
    for x, y in zip(b2["choices"][0]["logprobs"]["content"], ref["choices"][0]["logprobs"]["content"]):
        assert abs(x["logprob"] - y["logprob"]) < 1e-4
    assert ref["xlserve"]["session_tokens"] == b2["xlserve"]["session_tokens"]

    # only the new message: appended
    a2 = {"role": "assistant", "content": b2["choices"][0]["message"]["content"]}
    u3 = {"role": "user", "content": "Bye"}
    h, b3 = chat(daemon.port, sid, [u3], max_tokens=8)
    assert b3["xlserve"]["history"] == "append"
    assert b3["usage"]["prompt_tokens"] == len("\nUser: Bye\nAssistant: ")

    # full history again, including the appended turn
    a3 = {"role": "assistant", "content": b3["choices"][0]["message"]["content"]}
    u4 = {"role": "user", "content": "Again"}
    h, b4 = chat(daemon.port, sid, [SYS, u1, a1, u2, a2, u3, a3, u4], max_tokens=4)
    assert b4["xlserve"]["history"] == "full_history"
    assert b4["usage"]["prompt_tokens"] == len("\nUser: Again\nAssistant: ")

    # an edited history resets the session and replays it, and says so
    h, b5 = chat(daemon.port, sid, [SYS, {"role": "user", "content": "Hello!!"}], max_tokens=4)
    assert h.get("x-session-reset") == "1" and b5["xlserve"]["history"] == "reset"
    assert b5["xlserve"]["session_reset"] is True
    assert b5["xlserve"]["session_tokens"] == b5["usage"]["total_tokens"]
    # a client that edited an assistant reply also gets a reset
    bad = {"role": "assistant", "content": b5["choices"][0]["message"]["content"] + "x"}
    h, b6 = chat(daemon.port, sid, [SYS, {"role": "user", "content": "Hello!!"}, bad, u2], max_tokens=4)
    assert h.get("x-session-reset") == "1"
    # explicit modes
    h, b7 = chat(daemon.port, sid, [SYS, u1], max_tokens=4, history="append")
    assert b7["xlserve"]["history"] == "append" and "x-session-reset" not in h
    h, b8 = chat(daemon.port, sid, [u3], max_tokens=4, history="full")
    assert b8["xlserve"]["history"] == "reset" and h.get("x-session-reset") == "1"


def test_chat_stop_text_is_not_fed_twice(start_daemon, tiny_model):
    """When a reply ends because the model started the next user turn (the automatic stop
    string), the next turn does not feed that text again: the memory still equals the plain
    rendering of the whole conversation."""
    d = start_daemon(tiny_model, "--chat-user-prefix", "q", "--chat-user-suffix", ":",
                     "--chat-assistant-suffix", "", "--chat-assistant-prefix", ">")
    u1 = {"role": "user", "content": "hi"}
    h, b1 = chat(d.port, "tail-1", [u1], max_tokens=60)
    assert b1["choices"][0]["finish_reason"] == "stop"  # the reply ran into "q"
    r1 = b1["choices"][0]["message"]["content"]
    assert "q" not in r1
    u2 = {"role": "user", "content": "yo"}
    h, b2 = chat(d.port, "tail-1", [u1, {"role": "assistant", "content": r1}, u2], max_tokens=20,
                 logprobs=True)
    assert b2["xlserve"]["history"] == "full_history"
    assert b2["usage"]["prompt_tokens"] == len("yo:>")  # "q" was generated, not fed again
    h, ref = chat(d.port, "tail-2", [u1, {"role": "assistant", "content": r1}, u2], max_tokens=20,
                  logprobs=True)
    assert ref["choices"][0]["message"]["content"] == b2["choices"][0]["message"]["content"]
    assert ref["xlserve"]["session_tokens"] == b2["xlserve"]["session_tokens"]


def test_session_endpoints(daemon):
    st, h, b = X.request(daemon.port, "POST", "/v1/sessions")
    s = json.loads(b)
    assert st == 201 and len(s["id"]) == 32 and s["tokens"] == 0 and s["object"] == "session"
    sid = s["id"]
    assert h["x-session-id"] == sid
    X.complete(daemon.port, sid, prompt="Hello", max_tokens=5, temperature=0)
    st, s = X.get_session(daemon.port, sid)
    assert st == 200 and s["tokens"] == 10 and s["busy"] is False and s["turns"] == 1
    st, _, b = X.request(daemon.port, "GET", "/v1/sessions")
    assert st == 200 and sid in [x["id"] for x in json.loads(b)["data"]]
    st, _, b = X.request(daemon.port, "GET", "/v1/sessions?limit=0")
    assert st == 400 and json.loads(b)["error"]["param"] == "limit"
    # fork: both branches continue identically
    st, _, b = X.request(daemon.port, "POST", "/v1/sessions/%s/fork" % sid)
    f = json.loads(b)
    assert st == 201 and f["forked_from"] == sid and f["tokens"] == 10 and f["id"] != sid
    x = X.complete(daemon.port, sid, prompt=" more", max_tokens=12, temperature=0)
    y = X.complete(daemon.port, f["id"], prompt=" more", max_tokens=12, temperature=0)
    assert x["choices"][0]["text"] == y["choices"][0]["text"]
    st, _, b = X.request(daemon.port, "DELETE", "/v1/sessions/" + sid)
    assert st == 200 and json.loads(b) == {"id": sid, "object": "session.deleted", "deleted": True}
    st, s = X.get_session(daemon.port, sid)
    assert st == 404 and s["error"]["code"] == "session_not_found"
    st, _, b = X.request(daemon.port, "DELETE", "/v1/sessions/" + sid)
    assert st == 404
    st, _, b = X.request(daemon.port, "GET", "/v1/sessions/bad$id")
    assert st == 400 and json.loads(b)["error"]["param"] == "session_id"
    st, _, b = X.request(daemon.port, "PUT", "/v1/sessions/" + f["id"])
    assert st == 405


def test_one_request_at_a_time_per_session(daemon):
    sid = "busy-1"
    c = daemon.conn()
    c.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": "go", "max_tokens": 500000, "stream": True}),
        headers={"Content-Type": "application/json", "X-Session-Id": sid})
    r = c.getresponse()
    assert r.status == 200
    assert r.read1(65536)  # generating
    st, _, b = X.post_json(daemon.port, "/v1/completions", {"prompt": "x"}, {"X-Session-Id": sid})
    assert st == 409 and b["error"]["code"] == "session_busy"
    st, _, b = X.request(daemon.port, "DELETE", "/v1/sessions/" + sid)
    assert st == 409
    st, _, b = X.request(daemon.port, "POST", "/v1/sessions/%s/fork" % sid)
    assert st == 409
    st, s = X.get_session(daemon.port, sid)
    assert st == 200 and s["busy"] is True
    c.close()  # disconnect: the generation is cancelled and the session released
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        st, s = X.get_session(daemon.port, sid)
        if not s["busy"]:
            break
        time.sleep(0.02)
    assert s["busy"] is False
    # the session is consistent: a new turn works and counts every token fed
    before = s["tokens"]
    b = X.complete(daemon.port, sid, prompt="!", max_tokens=3)
    assert b["xlserve"]["session_tokens"] == before + 1 + 3


def test_concurrent_sessions_do_not_mix(daemon):
    n = 8
    prompts = ["session %d says %s" % (i, "abcdefgh"[i] * (i + 3)) for i in range(n)]
    results = {}

    def run(i, tag, stream):
        sid = "mix-%s-%d" % (tag, i)
        out = []
        for turn in range(2):
            body = {"prompt": prompts[i] if turn == 0 else " then", "max_tokens": 30,
                    "temperature": 0.8, "seed": 1000 + i}
            if stream:
                body["stream"] = True
                st, h, ev = X.stream(daemon.port, "/v1/completions", body, {"X-Session-Id": sid})
                out.append("".join(c["choices"][0]["text"] for c in X.sse_json(ev)))
            else:
                out.append(X.complete(daemon.port, sid, **body)["choices"][0]["text"])
        results[(tag, i)] = out

    threads = [threading.Thread(target=run, args=(i, "par", i % 2 == 0)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for i in range(n):
        run(i, "seq", False)
    for i in range(n):
        assert results[("par", i)] == results[("seq", i)], i


def test_eviction_says_session_expired(start_daemon, tiny_model):
    d = start_daemon(tiny_model, "--session-ram-mb", "1")
    for i in range(40):  # a tiny session holds ~33 KB: 1 MiB keeps about 30
        X.complete(d.port, "ev-%d" % i, prompt="x", max_tokens=0)
    st, b = X.get_session(d.port, "ev-0")
    assert st == 404 and b["error"]["code"] == "session_expired"
    st, _, b = X.post_json(d.port, "/v1/completions", {"prompt": "x"}, {"X-Session-Id": "ev-0"})
    assert st == 404 and b["error"]["code"] == "session_expired"
    assert X.get_session(d.port, "ev-39")[0] == 200
    st, _, _ = X.request(d.port, "DELETE", "/v1/sessions/ev-0")  # acknowledge the loss
    assert st == 200
    X.complete(d.port, "ev-0", prompt="x", max_tokens=1)
    d.wait_log(lambda o: o.get("event") == "session_evicted")


def test_fork_is_a_use_of_its_parent(start_daemon, tiny_model):
    """Without a store, under a budget of about 30 sessions: 1,000 forks of one parent, and the
    parent stays (its forks leave RAM instead, oldest first)."""
    d = start_daemon(tiny_model, "--session-ram-mb", "1", "--access-log", "false")
    X.complete(d.port, "parent", prompt="Fanny Price", max_tokens=4, temperature=0)
    st, before = X.get_session(d.port, "parent")
    c = d.conn()
    forks = []
    for i in range(1000):
        c.request("POST", "/v1/sessions/parent/fork")
        r = c.getresponse()
        b = json.loads(r.read())
        assert r.status == 201, (i, b)
        forks.append(b["id"])
    c.close()
    st, s = X.get_session(d.port, "parent")
    assert st == 200, s
    assert (s["tokens"], s["transcript_digest"]) == (before["tokens"], before["transcript_digest"])
    st, b = X.get_session(d.port, forks[0])
    assert st == 404 and b["error"]["code"] == "session_expired"  # the budget was at work
    assert X.get_session(d.port, forks[-1])[0] == 200
    X.complete(d.port, "parent", prompt=" of Mansfield", max_tokens=4, temperature=0)


def test_ttl_expiry(start_daemon, tiny_model):
    d = start_daemon(tiny_model, "--session-ttl", "1")
    X.complete(d.port, "ttl-1", prompt="x", max_tokens=1)
    deadline = time.monotonic() + 30
    st = 200
    while time.monotonic() < deadline and st == 200:
        st, b = X.get_session(d.port, "ttl-1")
        time.sleep(0.1)
    assert st == 404 and b["error"]["code"] == "session_expired"

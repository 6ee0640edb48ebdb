"""Several choices in one request, over real HTTP: `n` > 1 and `best_of` (the choices of a prompt
share its prefill: the state is forked after the prompt), a list of prompts (strings or token-id
lists), streams with per-choice indexes, summed usage, and n > 1 in a session (session_choice).
Choice k of a seeded request is the n = 1 request with seed + k, bit for bit: the fork is exact."""
import http.client
import json
import time

import pytest

import xlharness as X

P = "It is a truth universally acknowledged"


def comp(port, sid=None, **body):
    return X.complete(port, sid, **body)


def texts(b):
    return [c["text"] for c in sorted(b["choices"], key=lambda c: c["index"])]


def test_n_choices_equal_single_requests_with_seed_plus_k(daemon):
    b = comp(daemon.port, prompt=P, max_tokens=12, n=4, seed=40, temperature=1.0, logprobs=2)
    assert [c["index"] for c in b["choices"]] == [0, 1, 2, 3]
    assert len(set(texts(b))) > 1  # different draws
    total = 0
    for k, c in enumerate(sorted(b["choices"], key=lambda c: c["index"])):
        ref = comp(daemon.port, prompt=P, max_tokens=12, seed=40 + k, temperature=1.0, logprobs=2)
        r = ref["choices"][0]
        assert c["text"] == r["text"] and c["finish_reason"] == r["finish_reason"]
        for x, y in zip(c["logprobs"]["token_logprobs"], r["logprobs"]["token_logprobs"]):
            assert abs(x - y) < 1e-5
        assert c["logprobs"]["top_logprobs"][0] == r["logprobs"]["top_logprobs"][0]
        total += ref["usage"]["completion_tokens"]
    assert b["usage"]["prompt_tokens"] == len(P)  # the prompt once
    assert b["usage"]["completion_tokens"] == total
    # the access log counts every choice's tokens too
    line = daemon.wait_log(lambda l: l.get("event") == "request" and l.get("tokens_out") == total
                           and l.get("tokens_in") == len(P))
    assert line["status"] == 200


def test_the_prompt_is_fed_once_for_all_choices(daemon):
    before = X.metric(daemon.port, "xlserve_prompt_tokens_total")
    comp(daemon.port, prompt=P * 3, max_tokens=4, n=5, seed=1)
    after = X.metric(daemon.port, "xlserve_prompt_tokens_total")
    assert after - before == len(P * 3)


def test_list_of_prompts_with_n(daemon):
    ids = list(b"Once upon a time")
    b = comp(daemon.port, prompt=[P, ids, "abc"], max_tokens=6, n=2, seed=9, temperature=0.9)
    assert [c["index"] for c in b["choices"]] == list(range(6))
    for i, p in enumerate([P, ids, "abc"]):
        for j in range(2):
            ref = comp(daemon.port, prompt=p, max_tokens=6, seed=9 + i * 2 + j, temperature=0.9)
            assert texts(b)[i * 2 + j] == ref["choices"][0]["text"], (i, j)
    assert b["usage"]["prompt_tokens"] == len(P) + len(ids) + 3
    # greedy: each prompt's choices equal its own single greedy answer
    g = comp(daemon.port, prompt=["abc", "xyz"], max_tokens=5, temperature=0)
    for i, p in enumerate(["abc", "xyz"]):
        assert texts(g)[i] == comp(daemon.port, prompt=p, max_tokens=5, temperature=0)["choices"][0]["text"]


def test_best_of_returns_the_n_most_likely(daemon):
    b = comp(daemon.port, prompt=P, max_tokens=8, n=2, best_of=5, seed=3, temperature=1.0,
             logprobs=0)
    assert [c["index"] for c in b["choices"]] == [0, 1]
    sums = []
    for k in range(5):
        r = comp(daemon.port, prompt=P, max_tokens=8, seed=3 + k, temperature=1.0, logprobs=0)
        sums.append((sum(r["choices"][0]["logprobs"]["token_logprobs"]), r["choices"][0]["text"]))
    best = [t for _, t in sorted(sums, key=lambda x: -x[0])[:2]]
    assert texts(b) == best
    assert b["usage"]["completion_tokens"] == 5 * 8  # every candidate generated


def test_stream_with_n_carries_per_choice_indexes(daemon):
    body = dict(prompt=P, max_tokens=10, n=3, seed=21, temperature=1.0, stream=True,
                stream_options={"include_usage": True})
    st, h, ev = X.stream(daemon.port, "/v1/completions", body)
    assert st == 200
    chunks = X.sse_json(ev)
    got, finish = {}, {}
    for c in chunks[:-1]:
        ch = c["choices"][0]
        got[ch["index"]] = got.get(ch["index"], "") + ch["text"]
        if ch["finish_reason"]:
            finish[ch["index"]] = ch["finish_reason"]
    ref = comp(daemon.port, prompt=P, max_tokens=10, n=3, seed=21, temperature=1.0)
    assert [got[i] for i in range(3)] == texts(ref)
    assert finish == {0: "length", 1: "length", 2: "length"}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == ref["usage"]
    # chat: one role chunk per choice, then deltas
    st, h, ev = X.stream(daemon.port, "/v1/chat/completions",
                         {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                          "n": 2, "seed": 2, "stream": True})
    roles = [c["choices"][0]["index"] for c in X.sse_json(ev)
             if c["choices"][0]["delta"].get("role") == "assistant"]
    assert roles == [0, 1]


def test_chat_n(daemon):
    st, h, b = X.post_json(daemon.port, "/v1/chat/completions",
                           {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6,
                            "n": 3, "seed": 5})
    assert st == 200, b
    assert [c["index"] for c in b["choices"]] == [0, 1, 2]
    assert all(c["message"]["role"] == "assistant" for c in b["choices"])


def test_session_keeps_the_named_choice(daemon):
    sid = "choices-1"
    st, h, b = X.post_json(daemon.port, "/v1/completions",
                           dict(prompt=P, max_tokens=8, n=3, seed=6), headers={"X-Session-Id": sid})
    assert st == 400 and b["error"]["param"] == "n" and "session_choice" in b["error"]["message"]
    b = comp(daemon.port, sid, prompt=P, max_tokens=8, n=3, seed=6, session_choice=2,
             temperature=1.0, logprobs=0)
    kept = texts(b)[2]
    kept_ids = X.ids_of(b["choices"][2]["logprobs"]["tokens"])
    assert b["xlserve"]["session_tokens"] == len(P) + 8
    # the memory continues from choice 2: the next turn equals one uninterrupted text
    nxt = comp(daemon.port, sid, prompt=" and so", max_tokens=8, temperature=0)
    ref = comp(daemon.port, prompt=list(P.encode()) + kept_ids + list(b" and so"), max_tokens=8,
               temperature=0)
    assert nxt["choices"][0]["text"] == ref["choices"][0]["text"]
    assert kept == comp(daemon.port, prompt=P, max_tokens=8, seed=8, temperature=1.0)["choices"][0]["text"]
    # chat in a session
    st, h, c = X.post_json(daemon.port, "/v1/chat/completions",
                           {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                            "n": 2, "session_choice": 1}, headers={"X-Session-Id": "choices-2"})
    assert st == 200 and len(c["choices"]) == 2, c
    st, s = X.get_session(daemon.port, "choices-2")
    assert s["messages"] == 2


@pytest.mark.parametrize("body,param", [
    ({"prompt": "a", "n": 2, "best_of": 1}, "best_of"),
    ({"prompt": "a", "n": 1, "best_of": 3, "stream": True}, "best_of"),
    ({"prompt": "a", "n": 2, "session_choice": 1}, "session_choice"),
    ({"prompt": ["a"] * 9, "n": 9, "best_of": 16, "max_tokens": 1}, "best_of"),
    ({"prompt": ["a", 5]}, "prompt[1]"),
    ({"prompt": ["a", [1, 99999]]}, "prompt[1]"),
    ({"prompt": ["a", ""], "max_tokens": 3}, "prompt[1]"),
    ({"prompt": ["a", ""], "max_tokens": 0}, "prompt[1]"),
])
def test_bad_choice_requests(daemon, body, param):
    st, h, b = X.post_json(daemon.port, "/v1/completions", body)
    assert st == 400 and b["error"]["param"] == param, b


def test_bad_choice_requests_in_a_session(daemon):
    h = {"X-Session-Id": "choices-3"}
    for body, param in [({"prompt": ["a", "b"], "session_choice": 0}, "prompt"),
                        ({"prompt": "a", "n": 2, "session_choice": 2}, "session_choice"),
                        ({"prompt": "a", "n": 2, "best_of": 3, "session_choice": 0}, "best_of")]:
        st, _, b = X.post_json(daemon.port, "/v1/completions", body, headers=h)
        assert st == 400 and b["error"]["param"] == param, b
    assert X.get_session(daemon.port, "choices-3")[0] == 404  # nothing was created


def test_client_leaving_cancels_every_choice(daemon):
    c = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=30)
    c.request("POST", "/v1/completions",
              body=json.dumps({"prompt": P, "max_tokens": 900000, "n": 4, "stream": True,
                               "stop": ["\u0001\u0002\u0003"]}).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    seen = []
    X.read_sse(r, on_event=lambda d: seen.append(d) or len(seen) < 8)
    c.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and X.metric(daemon.port, "xlserve_running") != 0:
        time.sleep(0.02)
    assert X.metric(daemon.port, "xlserve_running") == 0
    assert comp(daemon.port, prompt="a", max_tokens=2, n=2)["choices"]


def test_many_small_choice_requests_at_once(daemon):
    """Short prompts and max_tokens 0-1 end a group's choices at the fork itself: a worker must
    never fork into (and report done) a choice that is not queued yet. 200 such requests from 8
    clients at once all answer in full, and nothing is left running (this crashed the daemon,
    use after free, before the group was submitted under one lock)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(i):
        body = {"prompt": ["a", "bc"] if i % 3 == 0 else "a", "max_tokens": i % 2, "n": 4,
                "temperature": 1.0, "stream": i % 4 == 1}
        if body["stream"]:
            st, h, ev = X.stream(daemon.port, "/v1/completions", body)
            return st, len({c["choices"][0]["index"] for c in X.sse_json(ev) if c["choices"]})
        st, h, b = X.post_json(daemon.port, "/v1/completions", body)
        return st, len(b["choices"])

    with ThreadPoolExecutor(8) as pool:
        res = list(pool.map(one, range(200)))
    for i, (st, n) in enumerate(res):
        assert st == 200 and n == (8 if i % 3 == 0 else 4), (i, st, n)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and X.metric(daemon.port, "xlserve_running") != 0:
        time.sleep(0.02)
    assert X.metric(daemon.port, "xlserve_running") == 0


def test_the_choices_decode_as_one_batch(start_daemon, tiny_model):
    """One worker, nothing else running: the n = 4 choices of a prompt decode together, every
    decode step one forward pass of 4 sessions (xlserve_batch_size), not 4 passes of one."""
    d = start_daemon(tiny_model, "--workers", "1")

    def passes():
        m = X.metrics(d.port)
        total = m["xlserve_batch_size_count"]
        return total, total - m['xlserve_batch_size_bucket{le="2"}']  # all, those of 3+ rows

    total0, wide0 = passes()
    b = comp(d.port, prompt=P, max_tokens=12, n=4, seed=11, temperature=1.0)
    assert [c["finish_reason"] for c in b["choices"]] == ["length"] * 4
    total1, wide1 = passes()
    # the prompt (one pass: under a prefill chunk), then 11 decode steps of the 4 choices
    assert wide1 - wide0 >= 11 and total1 - total0 <= 13, (total1 - total0, wide1 - wide0)

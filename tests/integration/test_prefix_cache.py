"""The prefix cache over real HTTP: a new conversation whose system prompt was fed before starts
from the cached memory of it and answers exactly, bit for bit, what a daemon without the cache
answers (seeded sampling, every log-prob equal); hits, misses and saved tokens are counted in
/metrics; another system prompt misses; sessions started from one entry are independent of each
other and of the entry; the cache stays within its own size and within what the session RAM
budget leaves after the sessions (least recently used entries evicted)."""
import xlharness as X

CHUNK = "16"  # prefill chunk: prefixes are cached in whole chunks
SYS = ("You are a careful assistant for a small library. Answer in one short sentence and "
       "never invent a title that is not in the catalogue.")  # ~150 bytes: 9 chunks
SYS2 = ("Ahoy! Be a pirate who answers every question about the sea with a shanty, and "
        "nothing else, whatever the question may be about, ever.")


def chat(port, messages, sid=None, seed=11, max_tokens=24):
    h = {"X-Session-Id": sid} if sid else {}
    st, _, b = X.post_json(port, "/v1/chat/completions",
                           dict(messages=messages, max_tokens=max_tokens, temperature=1.0,
                                seed=seed, logprobs=True, top_logprobs=3), headers=h)
    assert st == 200, b
    return b


def answer(b):
    """Text and every log-prob (chosen and alternatives) of a chat response."""
    c = b["choices"][0]
    return c["message"]["content"], [
        (t["token"], t["logprob"], [(a["token"], a["logprob"]) for a in t["top_logprobs"]])
        for t in c["logprobs"]["content"]]


def conv(system, user):
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def pc(port):
    m = X.metrics(port)
    return {k: m["xlserve_prefix_cache_" + k] for k in
            ("hits_total", "misses_total", "tokens_saved_total", "evictions_total", "bytes",
             "entries")}


def pair(start_daemon, model, *args):
    on = start_daemon(model, "--prefill-chunk", CHUNK, "--prefix-cache-mb", "64", *args)
    off = start_daemon(model, "--prefill-chunk", CHUNK, "--prefix-cache-mb", "0", *args)
    return on, off


def test_hit_answers_bit_for_bit_what_a_fresh_prefill_answers(start_daemon, tiny_model):
    on, off = pair(start_daemon, tiny_model)
    first = chat(on.port, conv(SYS, "Do you have Moby Dick?"))
    m = pc(on.port)
    assert (m["hits_total"], m["misses_total"], m["entries"]) == (0, 1, 1)
    assert m["bytes"] > 0
    assert answer(first) == answer(chat(off.port, conv(SYS, "Do you have Moby Dick?")))
    for k, user in enumerate(["And Emma?", "Opening hours, please.", "Do you have Moby Dick?"]):
        a = chat(on.port, conv(SYS, user), seed=3 + k)
        b = chat(off.port, conv(SYS, user), seed=3 + k)
        assert answer(a) == answer(b), user
        assert a["usage"] == b["usage"]
    m = pc(on.port)
    assert (m["hits_total"], m["misses_total"], m["entries"]) == (3, 1, 1)
    # the whole chunks within the rendered system message, for each of the 3 hits
    saved = m["tokens_saved_total"] / 3
    assert saved % int(CHUNK) == 0 and len(SYS) - int(CHUNK) < saved <= len(SYS) + 32
    # a daemon without the cache counts nothing
    assert pc(off.port)["hits_total"] == 0 and pc(off.port)["misses_total"] == 0
    # a new session (not only a stateless request) starts from it too
    a = chat(on.port, conv(SYS, "Is it raining?"), sid="fresh-1")
    assert answer(a) == answer(chat(off.port, conv(SYS, "Is it raining?"), sid="fresh-1"))
    assert pc(on.port)["hits_total"] == 4


def test_a_repeated_completion_prompt_hits_and_matches(start_daemon, tiny_model):
    on, off = pair(start_daemon, tiny_model)
    prompt = "The catalogue lists these books in order: " * 4  # 172 bytes
    body = dict(prompt=prompt, max_tokens=16, temperature=1.0, seed=5, logprobs=3)
    a1, a2 = X.complete(on.port, **body), X.complete(on.port, **body)
    ref = X.complete(off.port, **body)
    for a in (a1, a2):
        assert a["choices"][0]["text"] == ref["choices"][0]["text"]
        assert a["choices"][0]["logprobs"] == ref["choices"][0]["logprobs"]
    m = pc(on.port)
    assert (m["hits_total"], m["misses_total"]) == (1, 1)
    assert m["tokens_saved_total"] == (len(prompt) - 1) // 16 * 16


def test_another_system_prompt_misses(start_daemon, tiny_model):
    on = start_daemon(tiny_model, "--prefill-chunk", CHUNK)  # the default size: on
    chat(on.port, conv(SYS, "Hello"))
    chat(on.port, conv(SYS2, "Hello"))
    # the same text with a changed first character: nothing in common at a chunk boundary
    chat(on.port, conv("y" + SYS[1:], "Hello"))
    m = pc(on.port)
    assert (m["hits_total"], m["misses_total"], m["entries"]) == (0, 3, 3)
    # no system message: nothing shared, nothing looked up
    chat(on.port, [{"role": "user", "content": SYS}])
    m2 = pc(on.port)
    assert (m2["hits_total"], m2["misses_total"], m2["entries"]) == (0, 3, 3)
    chat(on.port, conv(SYS2, "Goodbye"))
    assert pc(on.port)["hits_total"] == 1


def test_sessions_from_the_cache_are_independent(start_daemon, tiny_model):
    """Two sessions start from one entry; feeding the first (a long turn that wraps its memory)
    changes neither the second nor the entry: each continues exactly like on a daemon without
    the cache, and a third session started later still matches."""
    on, off = pair(start_daemon, tiny_model)
    hist = {}
    for sid in ("s1", "s2"):
        msgs = conv(SYS, "Hello")
        a, b = chat(on.port, msgs, sid=sid), chat(off.port, msgs, sid=sid)
        assert answer(a) == answer(b)
        hist[sid] = msgs + [a["choices"][0]["message"]]
    assert pc(on.port)["hits_total"] == 1  # s2 came from the entry s1's request stored
    h1 = hist["s1"] + [{"role": "user", "content": "Tell me everything you know " * 5}]
    a, b = chat(on.port, h1, sid="s1", max_tokens=40), chat(off.port, h1, sid="s1", max_tokens=40)
    assert answer(a) == answer(b)
    h2 = hist["s2"] + [{"role": "user", "content": "Thanks."}]
    a, b = chat(on.port, h2, sid="s2", seed=9), chat(off.port, h2, sid="s2", seed=9)
    assert answer(a) == answer(b)
    msgs = conv(SYS, "Hello")
    a, b = chat(on.port, msgs, sid="s3"), chat(off.port, msgs, sid="s3")
    assert answer(a) == answer(b)
    assert pc(on.port)["hits_total"] == 2


# a state of 0.5 MiB at 128 positions (2 layers x (keys + values) x 256 floats per position)
WIDE = dict(d_model=64, d_embed=64, n_head=8, d_head=32, d_inner=64, n_layer=2, mem_len=128)


def long_system(k):
    return ("Rule %d: " % k) + "answer briefly and kindly, citing the catalogue. " * 4


def test_the_cache_stays_within_its_size(start_daemon, tmp_path):
    model = X.write_tiny_model(tmp_path / "wide", **WIDE)
    d = start_daemon(model, "--prefill-chunk", CHUNK, "--prefix-cache-mb", "1")
    for k in range(4):
        chat(d.port, conv(long_system(k), "Hi"), max_tokens=2)
        m = pc(d.port)
        assert m["bytes"] <= 1 << 20
    m = pc(d.port)
    assert m["misses_total"] == 4 and m["entries"] == 1 and m["evictions_total"] == 3
    # least recently used first: the latest is still there, the first is gone
    chat(d.port, conv(long_system(3), "Hello"), max_tokens=2)
    assert pc(d.port)["hits_total"] == 1
    chat(d.port, conv(long_system(0), "Hello"), max_tokens=2)
    assert pc(d.port)["hits_total"] == 1 and pc(d.port)["misses_total"] == 5


def test_sessions_take_the_budget_from_the_cache(start_daemon, tmp_path):
    """session_ram_mb counts the cache: sessions growing into it evict cache entries (LRU)
    first; no session is evicted while the cache holds anything, and the total stays within
    the budget."""
    model = X.write_tiny_model(tmp_path / "wide", **WIDE)
    budget = 4 << 20
    d = start_daemon(model, "--prefill-chunk", CHUNK, "--prefix-cache-mb", "64",
                     "--session-ram-mb", "4")
    for k in range(3):  # three entries of about 0.5 MiB
        chat(d.port, conv(long_system(k), "Hi"), max_tokens=2)
    m = pc(d.port)
    assert m["entries"] == 3 and m["evictions_total"] == 0
    for i in range(6):  # sessions of 0.5 MiB each (their memory is allocated whole)
        chat(d.port, conv(long_system(0), "Hi"), sid="u%d" % i, max_tokens=2)
        vals = X.metrics(d.port)
        assert vals["xlserve_prefix_cache_bytes"] + vals["xlserve_session_ram_bytes"] <= budget
        assert vals["xlserve_sessions_evicted_total"] == 0
    m = pc(d.port)
    assert m["evictions_total"] >= 2 and m["entries"] <= 1
    assert X.metric(d.port, "xlserve_sessions_in_ram") == 6


def test_a_session_from_the_cache_is_stored_and_restored_exactly(start_daemon, tiny_model,
                                                                 tmp_path):
    """A durable session that started from a cached prefix is saved like any other: after a
    restart it is read back from the store and continues exactly like a session that fed
    everything on a daemon without the cache or a store."""
    args = ["--prefill-chunk", CHUNK, "--state-dir", str(tmp_path / "state")]
    on = start_daemon(tiny_model, *args)
    off = start_daemon(tiny_model, "--prefill-chunk", CHUNK, "--prefix-cache-mb", "0")
    chat(on.port, conv(SYS, "Warm the cache."))
    msgs = conv(SYS, "Hello")
    a, b = chat(on.port, msgs, sid="kept"), chat(off.port, msgs, sid="kept")
    assert answer(a) == answer(b)
    assert pc(on.port)["hits_total"] == 1
    assert on.stop() == 0
    on = start_daemon(tiny_model, *args)
    h = msgs + [a["choices"][0]["message"], {"role": "user", "content": "And then?"}]
    a, b = chat(on.port, h, sid="kept", seed=8), chat(off.port, h, sid="kept", seed=8)
    assert answer(a) == answer(b)
    assert X.metric(on.port, "xlserve_sessions_restored_total") == 1

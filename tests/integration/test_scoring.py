"""Prompt scoring over real HTTP: `echo` with `logprobs` on /v1/completions and vLLM's
`prompt_logprobs` give the prompt tokens' log-probs, equal to `xlserve eval --dump-nll` on the same
text (the independent reference: the CLI's own segment loop, no scheduler); and
lm-evaluation-harness's `local-completions` backend, its request and parsing reproduced here,
computes loglikelihoods and greedy flags that match it."""
import math
import subprocess

import pytest

import xlharness as X

# over 3 prefill chunks (128) and many times mem_len (64): memory carried across segments
BOOK = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was "
        "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, "
        "it was the season of Light, it was the season of Darkness, it was the spring of hope, "
        "it was the winter of despair, we had everything before us, we had nothing before us, "
        "we were all going direct to Heaven, we were all going direct the other way. "
        "Caf\u00e9 na\u00efve \u2014 \u65e5\u672c.") * 2


def dump_nll(model, text, tmp_path, name="text"):
    """-log p(t[i+1] | t[..i]) per predicted token, from `xlserve eval --dump-nll`."""
    src, out = tmp_path / (name + ".txt"), tmp_path / (name + ".nll")
    src.write_bytes(text.encode())
    r = subprocess.run([X.xlserve_bin(), "eval", "--model", model, "--text", str(src),
                        "--dump-nll", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [float(x) for x in out.read_text().split()]


def tokenize(port, text):
    st, _, b = X.post_json(port, "/tokenize", {"prompt": text, "add_special_tokens": False})
    assert st == 200, b
    return b["tokens"]


def test_echo_logprobs_equal_eval_dump_nll(daemon, tiny_model, tmp_path):
    ref = dump_nll(tiny_model, BOOK, tmp_path)
    b = X.complete(daemon.port, prompt=BOOK, echo=True, logprobs=0, max_tokens=0)
    ch = b["choices"][0]
    lp = ch["logprobs"]
    n = len(BOOK.encode())
    assert ch["text"] == BOOK and ch["finish_reason"] == "length"
    assert b["usage"] == {"prompt_tokens": n, "completion_tokens": 0, "total_tokens": n}
    assert X.ids_of(lp["tokens"]) == list(BOOK.encode())
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert len(lp["token_logprobs"]) == n and len(ref) == n - 1
    worst = max(abs(-r - s) for r, s in zip(ref, lp["token_logprobs"][1:]))
    assert worst < 1e-5, worst
    # text_offset: byte offsets of each token in the echoed text
    offs, o = [], 0
    for t in lp["tokens"]:
        offs.append(o)
        o += 1
    assert lp["text_offset"] == offs
    assert all(t == {} for t in lp["top_logprobs"][1:])  # logprobs 0: no alternatives


def test_echo_top_logprobs_and_generated_tail(daemon):
    prompt = "the season of Light, the season of Dark"
    b = X.complete(daemon.port, prompt=prompt, echo=True, logprobs=5, max_tokens=4, temperature=0)
    ch = b["choices"][0]
    lp = ch["logprobs"]
    plain = X.complete(daemon.port, prompt=prompt, logprobs=5, max_tokens=4, temperature=0)
    gen = plain["choices"][0]
    # the echo is the prompt, then the same completion as without echo
    assert ch["text"] == prompt + gen["text"]
    n = len(prompt)
    assert lp["tokens"][n:] == gen["logprobs"]["tokens"]
    assert lp["token_logprobs"][n:] == gen["logprobs"]["token_logprobs"]
    assert lp["text_offset"] == list(range(n + 4))
    for i in range(1, n):
        top = lp["top_logprobs"][i]
        assert len(top) == 5
        vals = list(top.values())
        assert vals == sorted(vals, reverse=True)
        assert lp["token_logprobs"][i] <= vals[0]
        # the scored token among the alternatives carries exactly its own log-prob
        if lp["tokens"][i] in top:
            assert top[lp["tokens"][i]] == lp["token_logprobs"][i]
        else:
            assert lp["token_logprobs"][i] <= vals[-1]
        # distributions: alternatives' probabilities sum to at most 1
        assert sum(math.exp(v) for v in vals) <= 1 + 1e-5


def test_echo_token_id_prompt_and_max_tokens_zero(daemon):
    ids = list(b"scoring ids")
    b = X.complete(daemon.port, prompt=ids, echo=True, logprobs=1, max_tokens=0)
    ch = b["choices"][0]
    assert ch["text"] == "scoring ids"
    assert X.ids_of(ch["logprobs"]["tokens"]) == ids
    s = X.complete(daemon.port, prompt="scoring ids", echo=True, logprobs=1, max_tokens=0)
    assert s["choices"][0]["logprobs"] == ch["logprobs"]
    # echo without logprobs: the text only
    e = X.complete(daemon.port, prompt="abc", echo=True, max_tokens=2, temperature=0)
    assert e["choices"][0]["text"].startswith("abc") and e["choices"][0]["logprobs"] is None


def test_echo_in_session_scores_given_memory(daemon, tiny_model, tmp_path):
    """In a session, echo scores the new prompt given what the memory holds: the pending token
    of the previous turn scores its first token too."""
    first = "Once upon a time, "
    t1 = X.complete(daemon.port, sid="score-sess", prompt=first, max_tokens=6, temperature=0)
    gen = t1["choices"][0]["text"]
    second = "there was a kingdom by the sea."
    t2 = X.complete(daemon.port, sid="score-sess", prompt=second, echo=True, logprobs=0,
                    max_tokens=0)
    lp = t2["choices"][0]["logprobs"]["token_logprobs"]
    assert t2["choices"][0]["text"] == second and lp[0] is not None
    ref = dump_nll(tiny_model, first + gen + second, tmp_path, "session")
    start = len((first + gen).encode()) - 1  # the row of the last generated token
    worst = max(abs(-r - s) for r, s in zip(ref[start:], lp))
    assert len(ref[start:]) == len(lp) and worst < 1e-5, worst


def test_prompt_logprobs_vllm_shape(daemon):
    prompt = "it was the age of wisdom"
    b = X.complete(daemon.port, prompt=prompt, prompt_logprobs=3, max_tokens=1, temperature=0)
    pl = b["choices"][0]["prompt_logprobs"]
    e = X.complete(daemon.port, prompt=prompt, echo=True, logprobs=3, max_tokens=0)
    elp = e["choices"][0]["logprobs"]
    assert pl[0] is None and len(pl) == len(prompt)
    for i in range(1, len(prompt)):
        entry = pl[i]
        tok = str(ord(prompt[i]))
        assert tok in entry and entry[tok]["decoded_token"] == prompt[i]
        assert entry[tok]["logprob"] == elp["token_logprobs"][i]
        ranked = sorted(entry.values(), key=lambda v: v["rank"])
        others = [v for k, v in entry.items() if k != tok]
        assert [v["rank"] for v in others] == sorted(v["rank"] for v in others)
        assert len(entry) in (3, 4)  # the token, plus the top 3 (which may include it)
        r = entry[tok]["rank"]
        if r <= 3:
            assert ranked[r - 1]["logprob"] == entry[tok]["logprob"]
        else:
            assert all(v["logprob"] >= entry[tok]["logprob"] for v in others)
        # the alternatives are the echo's top 3 (the token itself listed once)
        assert {v["decoded_token"] for k, v in entry.items() if k != tok} == \
            set(elp["top_logprobs"][i]) - {prompt[i]}
        assert (r <= 3) == (prompt[i] in elp["top_logprobs"][i])
    # chat: vLLM puts prompt_logprobs at the top level
    st, _, c = X.post_json(daemon.port, "/v1/chat/completions",
                           {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                            "prompt_logprobs": 0})
    assert st == 200 and c["prompt_logprobs"][0] is None and len(c["prompt_logprobs"]) > 2


@pytest.mark.parametrize("body,param", [
    ({"prompt": "a", "echo": True, "stream": True, "logprobs": 1}, "echo"),
    ({"prompt": "a", "prompt_logprobs": 2, "stream": True}, "prompt_logprobs"),
    ({"prompt": "a", "prompt_logprobs": 21}, "prompt_logprobs"),
    ({"prompt": "a", "echo": "yes"}, "echo"),
    ({"prompt": "a", "echo": True, "logprobs": 21}, "logprobs"),
])
def test_scoring_bad_requests(daemon, body, param):
    st, _, b = X.post_json(daemon.port, "/v1/completions", body)
    assert st == 400 and b["error"]["param"] == param, b


# ---- lm-evaluation-harness, local-completions backend (request + parsing reproduced) ----

def lm_eval_payload(model, prompt_ids, legacy=False):
    """The loglikelihood request body the harness builds (legacy: older releases)."""
    if legacy:
        return {"model": model, "prompt": prompt_ids, "temperature": 0, "max_tokens": 0,
                "logprobs": 10, "echo": True}
    return {"model": model, "prompt": prompt_ids, "temperature": 0, "max_tokens": 1,
            "logprobs": 1, "seed": 1234, "echo": True}


def lm_eval_parse(out, ctxlens, legacy=False):
    """(loglikelihood, is_greedy) per choice, as the harness reads them: the current release
    sums token_logprobs[ctxlen:-1] (the -1 drops the one generated token) and calls a token
    greedy when it equals max(top_logprobs.values()); the legacy one (max_tokens 0) sums
    token_logprobs[ctxlen:] and compares the top token's string with the token."""
    res = []
    for choice, ctxlen in zip(sorted(out["choices"], key=lambda c: c["index"]), ctxlens):
        assert ctxlen > 0
        lp = choice["logprobs"]
        if legacy:
            ll = sum(lp["token_logprobs"][ctxlen:])
            greedy = True
            for i in range(ctxlen, len(lp["tokens"])):
                top = lp["top_logprobs"][i]
                if max(top.keys(), key=lambda k: top[k]) != lp["tokens"][i]:
                    greedy = False
                    break
        else:
            ll = sum(lp["token_logprobs"][ctxlen:-1])
            greedy = True
            for tok, top in zip(lp["token_logprobs"][ctxlen:-1], lp["top_logprobs"][ctxlen:-1]):
                if tok != max(top.values()):
                    greedy = False
                    break
        res.append((ll, greedy))
    return res


def harness_loglikelihood(port, model, pairs, legacy=False):
    """The harness's flow for each (context, continuation): the remote tokenizer (GET
    /tokenizer_info, POST /tokenize), then one request of prompt [[ids]] (a batch of one)."""
    st, _, info = X.request(port, "GET", "/tokenizer_info")
    import json
    assert st == 200 and "eos_token" in json.loads(info)
    results = []
    for ctx, cont in pairs:
        ctx_ids, cont_ids = tokenize(port, ctx), tokenize(port, cont)
        st, _, out = X.post_json(port, "/v1/completions",
                                 lm_eval_payload(model, [ctx_ids + cont_ids], legacy))
        assert st == 200, out
        results += lm_eval_parse(out, [len(ctx_ids)], legacy)
    return results


@pytest.mark.parametrize("legacy", [False, True])
def test_lm_eval_local_completions(daemon, tiny_model, tmp_path, legacy):
    # a greedy continuation: what the model writes at temperature 0 after the context
    ctx0 = "it was the epoch of "
    greedy = X.complete(daemon.port, prompt=ctx0, max_tokens=8, temperature=0)
    greedy_text = greedy["choices"][0]["text"]
    assert len(greedy_text.encode()) == 8 and greedy_text.isascii()
    pairs = [(ctx0, greedy_text),                                   # greedy
             ("it was the best of times, ", "it was the worst of times"),
             ("Question: what season? Answer:", " the season of Light"),
             (BOOK[:300], BOOK[300:340])]                            # long context: 3 chunks
    got = harness_loglikelihood(daemon.port, "tiny", pairs, legacy)
    for (ctx, cont), (ll, is_greedy) in zip(pairs, got):
        ref = dump_nll(tiny_model, ctx + cont, tmp_path, "pair")
        c0 = len(ctx.encode())
        want = -sum(ref[c0 - 1:c0 - 1 + len(cont.encode())])
        print(f"lm-eval {'legacy' if legacy else 'current'}: ctx {len(ctx.encode())} cont "
              f"{len(cont.encode())} tokens: loglikelihood {ll:.7f}, eval --dump-nll "
              f"{want:.7f}, diff {abs(ll - want):.2e}, greedy {is_greedy}")
        assert abs(ll - want) < 1e-5 * len(cont), (ctx, cont, ll, want)
    assert got[0][1] is True
    # a continuation that differs from the greedy one in its first token is not greedy
    other = chr(ord("a") + (ord(greedy_text[0]) - ord("a") + 1) % 26) + greedy_text[1:]
    (_, g2), = harness_loglikelihood(daemon.port, "tiny", [(ctx0, other)], legacy)
    assert g2 is False


@pytest.mark.parametrize("legacy", [False, True])
def test_lm_eval_batch_equals_one_at_a_time(daemon, tiny_model, tmp_path, legacy):
    """The harness with batch_size > 1: one request of several [[ids], [ids], ...] prompts,
    choice i scoring prompt i. Each pair's loglikelihood and greedy flag equal the pair sent
    alone, and the sums equal `xlserve eval --dump-nll`."""
    ctx0 = "it was the epoch of "
    greedy_text = X.complete(daemon.port, prompt=ctx0, max_tokens=6,
                             temperature=0)["choices"][0]["text"]
    pairs = [(ctx0, greedy_text),
             ("it was the best of times, ", "it was the worst of times"),
             ("Q: ", " the season of Light"),
             (BOOK[:300], BOOK[300:340]),                            # 3 chunks
             ("we had everything before us, ", "we had nothing before us")]
    ids = [(tokenize(daemon.port, c), tokenize(daemon.port, t)) for c, t in pairs]
    st, _, out = X.post_json(daemon.port, "/v1/completions",
                             lm_eval_payload("tiny", [c + t for c, t in ids], legacy))
    assert st == 200, out
    assert [c["index"] for c in out["choices"]] == list(range(len(pairs)))
    for ch, (c, t) in zip(out["choices"], ids):  # each choice echoes its own prompt
        assert X.ids_of(ch["logprobs"]["tokens"][:len(c) + len(t)]) == c + t
        assert ch["text"].encode().startswith(bytes(c + t))
    batch = lm_eval_parse(out, [len(c) for c, _ in ids], legacy)
    single = harness_loglikelihood(daemon.port, "tiny", pairs, legacy)
    for (ctx, cont), (ll_b, g_b), (ll_1, g_1) in zip(pairs, batch, single):
        ref = dump_nll(tiny_model, ctx + cont, tmp_path, "pair")
        c0 = len(ctx.encode())
        want = -sum(ref[c0 - 1:c0 - 1 + len(cont.encode())])
        print(f"lm-eval batch {'legacy' if legacy else 'current'}: ctx {c0} cont "
              f"{len(cont.encode())}: batch {ll_b:.7f}, alone {ll_1:.7f}, eval --dump-nll "
              f"{want:.7f}")
        assert abs(ll_b - ll_1) < 1e-5 * len(cont) and g_b == g_1, (ctx, cont, ll_b, ll_1)
        assert abs(ll_b - want) < 1e-5 * len(cont), (ctx, cont, ll_b, want)
    assert batch[0][1] is True
    assert out["usage"]["prompt_tokens"] == sum(len(c) + len(t) for c, t in ids)


def test_echo_with_n_and_a_list_of_prompts(daemon):
    """n > 1 and a list of prompts with echo: choice i echoes prompt i // n (text and scores,
    equal to that prompt's own echo) followed by its own generated tokens, which are the
    tokens of the same request without echo."""
    prompts = ["it was the age of ", "Caf\u00e9 na\u00efve, it was"]
    body = dict(prompt=prompts, n=2, max_tokens=4, temperature=1, seed=7, logprobs=1)
    plain = X.complete(daemon.port, **body)
    echoed = X.complete(daemon.port, echo=True, **body)
    alone = [X.complete(daemon.port, prompt=p, echo=True, logprobs=1, max_tokens=0)
             for p in prompts]
    assert len(echoed["choices"]) == 4
    for ch, pl in zip(echoed["choices"], plain["choices"]):
        assert ch["index"] == pl["index"]
        prompt, ref = prompts[ch["index"] // 2], alone[ch["index"] // 2]["choices"][0]
        assert ch["text"] == prompt + pl["text"]
        lp, rlp = ch["logprobs"], ref["logprobs"]
        n = len(rlp["tokens"])
        assert lp["tokens"][:n] == rlp["tokens"] and lp["tokens"][n:] == pl["logprobs"]["tokens"]
        assert lp["token_logprobs"][0] is None
        assert max(abs(a - b) for a, b in zip(lp["token_logprobs"][1:n],
                                              rlp["token_logprobs"][1:])) < 1e-5
        assert lp["token_logprobs"][n:] == pl["logprobs"]["token_logprobs"]
        assert lp["text_offset"][n] == len(prompt.encode())


def test_echo_in_session_after_scoring_only_turn(daemon):
    """A turn that only fed a prompt (max_tokens 0) leaves no pending token: the next echo's
    first token has no row to score it (null), the rest are scored given the memory."""
    a = X.complete(daemon.port, sid="score-only", prompt="first part. ", echo=True, logprobs=0,
                   max_tokens=0)
    b = X.complete(daemon.port, sid="score-only", prompt="second part.", echo=True, logprobs=0,
                   max_tokens=0)
    whole = X.complete(daemon.port, prompt="first part. second part.", echo=True, logprobs=0,
                       max_tokens=0)
    n1 = len("first part. ")
    lp_b, lp_w = b["choices"][0]["logprobs"]["token_logprobs"], \
        whole["choices"][0]["logprobs"]["token_logprobs"]
    assert a["xlserve"]["session_tokens"] == n1 and lp_b[0] is None
    assert max(abs(x - y) for x, y in zip(lp_b[1:], lp_w[n1 + 1:])) < 1e-5


def test_bench_score_runs(tiny_model):
    """bench/score.py (scoring over HTTP next to xlserve eval) runs end to end on a tiny model."""
    import os
    import sys
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    r = subprocess.run([sys.executable, os.path.join(root, "bench", "score.py"), "--model",
                        tiny_model, "--xlserve", X.xlserve_bin(), "--bytes", "3000",
                        "--rounds", "1"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    table = r.stdout.splitlines()[2:]
    assert [l.split()[:3] for l in table] == [["xlserve", "eval", "%.3f" % float(table[0].split()[2])],
                                            ["echo", "logprobs", "0"], ["echo", "logprobs", "5"]]
    for line in table[1:]:
        assert float(line.split()[-1]) < 1e-5, r.stdout  # the same numbers as eval


@pytest.fixture(scope="module")
def word_model(tmp_path_factory):
    """The tiny model as a word-level one: vocab.txt with <eos>, <unk>, w0..w253."""
    return X.write_tiny_word_model(tmp_path_factory.mktemp("models") / "words")


def test_word_model_scoring_and_tokenizer(start_daemon, word_model, tmp_path):
    d = start_daemon(word_model)
    text = " ".join("w%d" % ((i * 37) % 254) for i in range(300)) + "\nw5 w6 zzz w7\nw8"
    st, _, info = X.request(d.port, "GET", "/tokenizer_info")
    import json
    info = json.loads(info)
    assert info["tokenizer"] == "words" and info["eos_token"] == "<eos>"
    assert info["unk_token"] == "<unk>"
    ids = tokenize(d.port, text)
    # w_i is id i + 2; each newline <eos> (0); an unknown word <unk> (1)
    assert ids == [(i * 37) % 254 + 2 for i in range(300)] + [0, 7, 8, 1, 9, 0, 10]
    st, _, back = X.post_json(d.port, "/detokenize", {"tokens": ids[:3]})
    assert st == 200 and back["prompt"] == "w0 w37 w74"
    ref = dump_nll(word_model, text, tmp_path, "words")
    b = X.complete(d.port, prompt=text, echo=True, logprobs=2, max_tokens=0)
    lp = b["choices"][0]["logprobs"]
    assert b["choices"][0]["text"] == text and len(lp["token_logprobs"]) == len(ids)
    assert lp["token_logprobs"][0] is None and len(ref) == len(ids) - 1
    worst = max(abs(-r - s) for r, s in zip(ref, lp["token_logprobs"][1:]))
    assert worst < 1e-5, worst


def test_echo_without_same_length_uses_tgt_len_segments(start_daemon, tmp_path_factory,
                                                       tmp_path):
    """A model without same_length depends on where the text is cut: the daemon feeds prompts in
    segments of tgt_len, as eval does, so the numbers still match."""
    m = X.write_tiny_model(tmp_path_factory.mktemp("models") / "nosame", same_length=False)
    d = start_daemon(m)
    ref = dump_nll(m, BOOK, tmp_path, "nosame")
    lp = X.complete(d.port, prompt=BOOK, echo=True, logprobs=1,
                    max_tokens=0)["choices"][0]["logprobs"]["token_logprobs"]
    worst = max(abs(-r - s) for r, s in zip(ref, lp[1:]))
    assert len(lp) == len(ref) + 1 and worst < 1e-5, worst

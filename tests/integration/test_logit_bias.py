"""logit_bias (OpenAI's shape: token id -> bias in [-100, 100]) is added to the model's
log-probabilities before sampling, greedy included; logprobs still report the model's own
distribution. Over real HTTP on the tiny byte-level model (token id = byte value)."""
import xlharness as X

PROMPT = "It is a truth universally acknowledged"


def first(port, **body):
    b = X.complete(port, prompt=PROMPT, max_tokens=1, temperature=0, logprobs=5, **body)
    lp = b["choices"][0]["logprobs"]
    return X.ids_of(lp["tokens"])[0], lp["token_logprobs"][0], lp["top_logprobs"][0]


def test_minus_100_on_the_greedy_token_picks_the_runner_up(daemon):
    tok, lp, top = first(daemon.port)
    ranked = sorted(top.items(), key=lambda kv: -kv[1])
    assert X.ids_of([ranked[0][0]])[0] == tok
    tok2, lp2, top2 = first(daemon.port, logit_bias={str(tok): -100})
    assert tok2 != tok
    assert X.ids_of([ranked[1][0]])[0] == tok2  # the second most likely token
    assert abs(lp2 - ranked[1][1]) < 1e-5  # reported under the model, not the bias
    assert top2 == top


def test_plus_100_forces_a_token_when_sampling(daemon):
    for seed in range(5):
        b = X.complete(daemon.port, prompt=PROMPT, max_tokens=20, temperature=1.0, seed=seed,
                       logit_bias={str(ord("Q")): 100})
        assert b["choices"][0]["text"] == "Q" * 20


def test_small_bias_shifts_the_greedy_choice_by_the_margin(daemon):
    tok, lp, top = first(daemon.port)
    ranked = sorted(top.items(), key=lambda kv: -kv[1])
    second = X.ids_of([ranked[1][0]])[0]
    gap = ranked[0][1] - ranked[1][1]
    below, _, _ = first(daemon.port, logit_bias={str(second): gap * 0.5})
    above, _, _ = first(daemon.port, logit_bias={str(second): gap + 0.01})
    assert below == tok and above == second


def test_chat_and_stream_apply_the_bias(daemon):
    st, h, b = X.post_json(daemon.port, "/v1/chat/completions",
                           {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8,
                            "temperature": 0.7, "seed": 3, "logit_bias": {str(ord("z")): 100}})
    assert st == 200, b
    assert b["choices"][0]["message"]["content"] == "z" * 8
    st, h, ev = X.stream(daemon.port, "/v1/completions",
                         {"prompt": PROMPT, "max_tokens": 6, "stream": True, "temperature": 0,
                          "logit_bias": {str(ord("k")): 100}})
    assert st == 200
    text = "".join(c["choices"][0]["text"] for c in X.sse_json(ev) if c["choices"])
    assert text == "k" * 6

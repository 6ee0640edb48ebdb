"""lm-evaluation-harness's loglikelihood_rolling against a byte model, over real HTTP: its
remote tokenizer finds the start token in /tokenizer_info (`eos_token`, tokenized through
/tokenize: the prefix token, since no model has a bos token), cuts the text into rolling
windows whose first context is that one token, and scores each window with a /v1/completions
echo request. The log-likelihoods equal `xlserve eval --dump-nll` of the same text after the
start token (1e-4)."""
import json

import pytest

import xlharness as X
from test_scoring import BOOK, dump_nll, lm_eval_payload, lm_eval_parse, tokenize


def rolling_windows(tokens, prefix, max_seq_len):
    """lm_eval.utils.get_rolling_token_windows(context_len=1) + make_disjoint_window."""
    pred_len = max_seq_len
    first = min(max_seq_len, len(tokens))
    out = [([prefix] + tokens[:first - 1], tokens[:first])]
    predicted = first
    while predicted < len(tokens):
        n = min(len(tokens) - predicted, pred_len)
        end = predicted + n
        out.append((tokens[end - max_seq_len - 1:end - 1], tokens[end - n:end]))
        predicted += n
    return [(a[:len(a) - (len(b) - 1)], b) for a, b in out]


def remote_prefix_token(port):
    """RemoteTokenizer: eos_token_id = tokenize(eos_token)[0]; prefix = bos or eos."""
    st, _, b = X.request(port, "GET", "/tokenizer_info")
    info = json.loads(b)
    assert st == 200
    assert info["bos_token"] is None
    assert info["eos_token"] is not None, "no start token: loglikelihood_rolling cannot run"
    eos_id = tokenize(port, info["eos_token"])[0]
    assert info["eos_token_id"] == eos_id
    return info["eos_token"], eos_id


@pytest.mark.parametrize("legacy", [False, True])
def test_loglikelihood_rolling_equals_eval(daemon, tiny_model, tmp_path, legacy):
    text = BOOK[:180]
    start_text, prefix = remote_prefix_token(daemon.port)
    assert (start_text, prefix) == ("\n", 10)  # byte models: the newline (docs/api.md)
    toks = tokenize(daemon.port, text)
    windows = rolling_windows(toks, prefix, max_seq_len=2047)
    assert len(windows) == 1 and windows[0][0] == [prefix]
    ll = 0.0
    for ctx, cont in windows:
        st, _, out = X.post_json(daemon.port, "/v1/completions",
                                 lm_eval_payload("tiny", [ctx + cont], legacy))
        assert st == 200, out
        (w_ll, _), = lm_eval_parse(out, [len(ctx)], legacy)
        ll += w_ll
    ref = dump_nll(tiny_model, start_text + text, tmp_path, "rolling")
    want = -sum(ref)  # every byte of the text, each given the start token and what precedes
    print("loglikelihood_rolling (%s) over %d bytes: %.7f; eval --dump-nll: %.7f" %
          ("legacy" if legacy else "current", len(toks), ll, want))
    assert len(ref) == len(toks)
    assert abs(ll - want) < 1e-4, (ll, want)


def test_rolling_request_with_the_start_token_as_text(daemon, tiny_model, tmp_path):
    """The same window sent as text (tokenized_requests=False): the prompt starts with the
    start token's text; echo, logprobs, max_tokens 0."""
    text = BOOK[:120]
    start_text, _ = remote_prefix_token(daemon.port)
    st, _, out = X.post_json(daemon.port, "/v1/completions",
                             {"model": "tiny", "prompt": start_text + text, "max_tokens": 0,
                              "echo": True, "logprobs": 1, "temperature": 0})
    assert st == 200, out
    lp = out["choices"][0]["logprobs"]["token_logprobs"]
    assert lp[0] is None and len(lp) == 1 + len(text.encode())
    ll = sum(lp[1:])
    want = -sum(dump_nll(tiny_model, start_text + text, tmp_path, "rolling_text"))
    assert abs(ll - want) < 1e-4, (ll, want)

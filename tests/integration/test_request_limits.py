"""Per-request limits over real HTTP on loopback: `max_prompt_tokens` counts every prompt of a
request (a list of prompts cannot multiply it), and the tokenizer endpoints are bounded by
`max_body_bytes` (413) and `max_prompt_tokens` (422), each refusal naming its limit."""
import json
import time

import pytest

import xlharness as X


@pytest.fixture(scope="module")
def small_limits(tiny_model):
    d = X.Daemon(tiny_model, ["--max-prompt-tokens", "100", "--max-body-bytes", "4096"])
    yield d
    assert d.stop() == 0, d.tail()


def error_of(b):
    return b["error"]


def test_eight_long_prompts_with_echo_and_logprobs_are_refused_at_once(daemon):
    """The attack: eight prompts just under the default limit (65536), each echoed with 20
    logprobs per token. Fed, it was 480k tokens and minutes of both cores; it is refused before
    anything is fed."""
    prompts = [("%d" % i) * 60000 for i in range(8)]
    t0 = time.monotonic()
    st, _, b = X.post_json(daemon.port, "/v1/completions",
                           {"prompt": prompts, "max_tokens": 0, "echo": True, "logprobs": 20},
                           timeout=120)
    took = time.monotonic() - t0
    print("eight 60,000-token prompts answered %d in %.3f s" % (st, took))
    assert st == 422, b
    e = error_of(b)
    assert e["code"] == "prompt_too_long"
    assert "480000" in e["message"] and "65536" in e["message"], e
    assert took < 10, took  # nothing was fed (feeding them took minutes)
    # the daemon is free at once
    assert X.complete(daemon.port, prompt="ok", max_tokens=1)["choices"]


def test_prompt_list_total_counts_against_the_limit(small_limits):
    port = small_limits.port
    # each prompt fits; together they do not
    st, _, b = X.post_json(port, "/v1/completions",
                           {"prompt": ["a" * 60, "b" * 41], "max_tokens": 1})
    assert st == 422, b
    e = error_of(b)
    assert e["code"] == "prompt_too_long" and "101" in e["message"] and "100" in e["message"]
    # ids count the same way
    st, _, b = X.post_json(port, "/v1/completions",
                           {"prompt": [[97] * 50, [98] * 51], "max_tokens": 1})
    assert st == 422 and "101" in error_of(b)["message"], b
    # exactly the limit is served, every choice of each prompt (choices fork the fed prompt)
    b = X.complete(port, prompt=["a" * 60, "b" * 40], max_tokens=1, n=3, echo=True,
                   logprobs=5)
    assert len(b["choices"]) == 6
    # a single prompt over it, as before
    st, _, b = X.post_json(port, "/v1/completions", {"prompt": "c" * 101, "max_tokens": 1})
    assert st == 422 and error_of(b)["code"] == "prompt_too_long", b


@pytest.mark.parametrize("path", ["/tokenize", "/v1/tokenize"])
def test_tokenize_result_is_bounded(small_limits, path):
    port = small_limits.port
    st, _, b = X.post_json(port, path, {"prompt": "x" * 100, "with_pieces": True})
    assert st == 200 and b["count"] == 100, b
    st, _, b = X.post_json(port, path, {"content": "x" * 101})
    assert st == 422, b
    e = error_of(b)
    assert e["code"] == "prompt_too_long" and "101" in e["message"], e
    assert "100" in e["message"] and "max_prompt_tokens" in e["message"], e


@pytest.mark.parametrize("path", ["/detokenize", "/v1/detokenize"])
def test_detokenize_input_is_bounded(small_limits, path):
    port = small_limits.port
    st, _, b = X.post_json(port, path, {"tokens": [120] * 100})
    assert st == 200 and b["content"] == "x" * 100, b
    st, _, b = X.post_json(port, path, {"tokens": [120] * 101})
    assert st == 422, b
    e = error_of(b)
    assert e["code"] == "prompt_too_long" and "max_prompt_tokens" in e["message"], e


@pytest.mark.parametrize("path", ["/tokenize", "/detokenize", "/v1/tokenize", "/v1/detokenize"])
def test_tokenizer_body_over_the_limit_is_413(small_limits, path):
    body = json.dumps({"prompt": "y" * 5000, "tokens": [1]}).encode()
    st, _, b = X.request(small_limits.port, "POST", path, body)
    assert st == 413, b
    e = json.loads(b)["error"]
    assert e["code"] == "body_too_large" and "4096" in e["message"], e

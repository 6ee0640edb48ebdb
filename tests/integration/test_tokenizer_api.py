"""The tokenizer endpoints in vLLM's and llama.cpp's shapes (POST /tokenize, /detokenize, GET
/tokenizer_info, with /v1/ aliases), GET /version, and the context facts in /v1/models; checked
against the byte tokenizer's definition (id = byte value) and the completions endpoint."""
import json

import pytest

import xlharness as X

TEXT = "Caf\u00e9 \u2014 tokens\n\u65e5\u672c"


@pytest.mark.parametrize("prefix", ["", "/v1"])
def test_tokenize_vllm_and_llamacpp_shapes(daemon, prefix):
    st, _, b = X.post_json(daemon.port, prefix + "/tokenize",
                           {"prompt": TEXT, "add_special_tokens": False, "return_token_strs": True})
    assert st == 200, b
    assert b["tokens"] == list(TEXT.encode()) and b["count"] == len(TEXT.encode())
    assert isinstance(b["max_model_len"], int) and b["max_model_len"] > 0
    assert X.ids_of(b["token_strs"]) == b["tokens"]
    # llama.cpp: "content", "add_special", "with_pieces"
    st, _, p = X.post_json(daemon.port, prefix + "/tokenize",
                           {"content": "ab\u00e9", "add_special": True, "with_pieces": True})
    assert st == 200, p
    assert [t["id"] for t in p["tokens"]] == list("ab\u00e9".encode())
    assert [t["piece"] for t in p["tokens"]][:2] == ["a", "b"]
    assert p["tokens"][2]["piece"].startswith("bytes:")  # half a UTF-8 character
    # the ids are what a completion counts as its prompt
    c = X.complete(daemon.port, prompt=TEXT, max_tokens=1)
    assert c["usage"]["prompt_tokens"] == b["count"]


@pytest.mark.parametrize("prefix", ["", "/v1"])
def test_detokenize_round_trip(daemon, prefix):
    ids = list(TEXT.encode())
    st, _, b = X.post_json(daemon.port, prefix + "/detokenize", {"tokens": ids})
    assert st == 200 and b == {"prompt": TEXT, "content": TEXT}
    st, _, b = X.post_json(daemon.port, prefix + "/detokenize",
                           {"tokens": [{"id": 104, "piece": "h"}, {"id": 105, "piece": "i"}]})
    assert st == 200 and b["content"] == "hi"
    st, _, b = X.post_json(daemon.port, prefix + "/detokenize", {"tokens": []})
    assert st == 200 and b["prompt"] == ""


def test_tokenizer_info_and_models_facts(daemon):
    for path in ("/tokenizer_info", "/v1/tokenizer_info"):
        st, _, b = X.request(daemon.port, "GET", path)
        info = json.loads(b)
        assert st == 200 and info["tokenizer"] == "bytes" and info["vocab_size"] == 256
        # byte models: the newline stands as the end/start token scorers put before a text
        assert info["eos_token"] == "\n" and info["eos_token_id"] == 10
        assert info["bos_token"] is None and info["add_bos_token"] is False
    st, _, b = X.request(daemon.port, "GET", "/v1/models")
    m = json.loads(b)["data"][0]
    x = m["xlserve"]
    assert (x["mem_len"], x["tgt_len"], x["vocab_size"], x["tokenizer"]) == (64, 16, 256, "bytes")
    assert x["clamp_len"] == -1 and x["prefill_chunk"] == 128
    assert m["max_model_len"] == x["max_prompt_tokens"] > 0
    st, _, b = X.request(daemon.port, "GET", "/version")
    v = json.loads(b)
    assert st == 200 and v["name"] == "xlserve" and v["version"].count(".") >= 1


@pytest.mark.parametrize("path,body,status,param", [
    ("/tokenize", {"prompt": 5}, 400, "prompt"),
    ("/tokenize", {}, 400, "content"),
    ("/tokenize", {"prompt": "a", "with_pieces": "yes"}, 400, "with_pieces"),
    ("/tokenize", {"messages": [{"role": "user", "content": "x"}]}, 400, "messages"),
    ("/tokenize", {"prompt": "a", "model": "other"}, 404, "model"),
    ("/detokenize", {"tokens": [1, 256]}, 400, "tokens"),
    ("/detokenize", {"tokens": [-1]}, 400, "tokens"),
    ("/detokenize", {"tokens": "abc"}, 400, "tokens"),
    ("/detokenize", {}, 400, "tokens"),
])
def test_tokenizer_bad_requests(daemon, path, body, status, param):
    st, _, b = X.post_json(daemon.port, path, body)
    assert st == status and b["error"]["param"] == param, b
    st, _, raw = X.request(daemon.port, "POST", path, b"[1,2]")
    assert st == 400 and json.loads(raw)["error"]["code"] == "invalid_json"


def test_tokenizer_routes_methods_and_auth(start_daemon, tiny_model):
    d = start_daemon(tiny_model, "--api-keys", "k1")
    st, _, _ = X.request(d.port, "POST", "/tokenize", {"prompt": "a"})
    assert st == 401
    st, _, b = X.post_json(d.port, "/tokenize", {"prompt": "a"}, {"Authorization": "Bearer k1"})
    assert st == 200 and b["tokens"] == [97]
    st, h, _ = X.request(d.port, "GET", "/tokenize", headers={"Authorization": "Bearer k1"})
    assert st == 405 and h["allow"] == "POST"
    st, _, _ = X.request(d.port, "GET", "/version")  # like /health: no key needed
    assert st == 200

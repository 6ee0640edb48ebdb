"""Every endpoint answers in the OpenAI shape; streaming is SSE with the documented headers and
framing; sampling options behave (seed reproducible, stop strings, logprobs, max_tokens)."""
import json

import xlharness as X


def test_health_models_metrics(daemon):
    st, h, b = X.request(daemon.port, "GET", "/health")
    assert st == 200 and json.loads(b) == {"status": "ok"}
    assert len(h["x-request-id"]) >= 16
    st, h, b = X.request(daemon.port, "GET", "/v1/models")
    m = json.loads(b)
    assert st == 200 and m["object"] == "list" and m["data"][0]["id"] == "tiny"
    assert m["data"][0]["xlserve"]["vocab_size"] == 256
    st, _, b = X.request(daemon.port, "GET", "/v1/models/tiny")
    assert st == 200 and json.loads(b)["id"] == "tiny"
    st, _, b = X.request(daemon.port, "GET", "/v1/models/other")
    assert st == 404 and json.loads(b)["error"]["code"] == "model_not_found"
    X.complete(daemon.port, prompt="warm up", max_tokens=3)
    st, h, b = X.request(daemon.port, "GET", "/metrics")
    text = b.decode()
    assert st == 200 and h["content-type"].startswith("text/plain")
    for name in ["xlserve_requests_total{route=\"completions\",status=\"200\"}",
                 "xlserve_completion_tokens_total", "xlserve_time_to_first_token_seconds_bucket",
                 "xlserve_inter_token_seconds_count", "xlserve_queue_depth",
                 "xlserve_batch_size_bucket", "xlserve_sessions_in_ram",
                 "xlserve_sessions_in_store", "xlserve_store_write_seconds_count",
                 "xlserve_store_read_seconds_count", "xlserve_session_restore_seconds_count"]:
        assert name in text, name


def test_completion_shape_and_usage(daemon):
    b = X.complete(daemon.port, prompt="Hello there", max_tokens=7, temperature=0)
    assert b["object"] == "text_completion" and b["id"].startswith("cmpl-")
    assert b["model"] == "tiny" and isinstance(b["created"], int)
    ch = b["choices"][0]
    assert ch["index"] == 0 and ch["finish_reason"] == "length" and ch["logprobs"] is None
    assert len(ch["text"].encode()) == 7  # the tiny model writes ASCII
    assert b["usage"] == {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


def test_greedy_is_deterministic_and_seed_reproduces(daemon):
    a = X.complete(daemon.port, prompt="abc", max_tokens=30, temperature=0)["choices"][0]["text"]
    b = X.complete(daemon.port, prompt="abc", max_tokens=30, temperature=0)["choices"][0]["text"]
    assert a == b
    s1 = X.complete(daemon.port, prompt="abc", max_tokens=40, temperature=1.0, seed=42)
    s2 = X.complete(daemon.port, prompt="abc", max_tokens=40, temperature=1.0, seed=42)
    s3 = X.complete(daemon.port, prompt="abc", max_tokens=40, temperature=1.0, seed=43)
    assert s1["choices"][0]["text"] == s2["choices"][0]["text"]
    assert s1["choices"][0]["text"] != s3["choices"][0]["text"]


def test_stop_string(daemon):
    full = X.complete(daemon.port, prompt="The cat", max_tokens=40, temperature=0)["choices"][0]["text"]
    # a stop string from the middle of the greedy text, not occurring earlier
    for i in range(3, len(full) - 2):
        stop = full[i:i + 2]
        if stop not in full[:i + 1]:
            break
    else:
        raise AssertionError("no usable stop string in %r" % full)
    b = X.complete(daemon.port, prompt="The cat", max_tokens=40, temperature=0, stop=[stop, "@@@"])
    assert b["choices"][0]["text"] == full[:i]
    assert b["choices"][0]["finish_reason"] == "stop"
    # the stop string's tokens were generated and count as completion tokens
    assert b["usage"]["completion_tokens"] == i + 2


def test_completion_logprobs(daemon):
    b = X.complete(daemon.port, prompt="abc", max_tokens=5, temperature=0, logprobs=3)
    lp = b["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 5
    assert lp["text_offset"] == [0, 1, 2, 3, 4]
    for tok, l, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert l <= 0 and len(top) == 3
        assert abs(max(top.values()) - l) < 1e-6  # greedy picks the most likely token
    assert "".join(lp["tokens"]) == b["choices"][0]["text"]


def test_chat_shape_and_logprobs(daemon):
    st, h, b = X.post_json(daemon.port, "/v1/chat/completions", {
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "max_tokens": 6, "temperature": 0, "logprobs": True, "top_logprobs": 2})
    assert st == 200, b
    assert b["object"] == "chat.completion" and b["id"].startswith("chatcmpl-")
    msg = b["choices"][0]["message"]
    assert msg["role"] == "assistant" and len(msg["content"]) == 6
    content = b["choices"][0]["logprobs"]["content"]
    assert len(content) == 6
    assert all(len(c["top_logprobs"]) == 2 and c["logprob"] <= 0 and len(c["bytes"]) == 1
               for c in content)
    assert "".join(c["token"] for c in content) == msg["content"]
    # rendered: "Be brief.\n\nUser: Hi\nAssistant: " = 32 tokens
    assert b["usage"]["prompt_tokens"] == len("Be brief.\n\nUser: Hi\nAssistant: ")


def test_stream_headers_framing_and_usage(daemon):
    st, h, ev = X.stream(daemon.port, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12, "temperature": 0,
        "stream": True, "stream_options": {"include_usage": True}})
    assert st == 200
    assert h["content-type"] == "text/event-stream"
    assert h["cache-control"] == "no-cache" and h["x-accel-buffering"] == "no"
    assert h.get("transfer-encoding") == "chunked"
    data = [d for _, d in ev]
    assert data[-1] == "[DONE]"
    chunks = X.sse_json(ev)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    fin = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(fin) == 1 and fin[0]["choices"][0]["finish_reason"] == "length"
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 12
    assert all(c["usage"] is None for c in chunks[:-1])
    # the same request without streaming gives the same text
    st, _, b = X.post_json(daemon.port, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12, "temperature": 0})
    assert b["choices"][0]["message"]["content"] == text


def test_completion_stream_without_usage(daemon):
    st, h, ev = X.stream(daemon.port, "/v1/completions", {
        "prompt": "abc", "max_tokens": 10, "temperature": 0, "stream": True, "logprobs": 1})
    chunks = X.sse_json(ev)
    assert [d for _, d in ev][-1] == "[DONE]"
    assert all("usage" not in c for c in chunks)
    text = "".join(c["choices"][0]["text"] for c in chunks)
    toks = sum(((c["choices"][0]["logprobs"] or {"tokens": []})["tokens"] for c in chunks), [])
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert text == X.complete(daemon.port, prompt="abc", max_tokens=10, temperature=0)["choices"][0]["text"]
    assert len(toks) == 10


def test_stream_arrives_incrementally(start_daemon, medium_model):
    """Tokens arrive as many chunks over time, not in one piece at the end."""
    d = start_daemon(medium_model)
    c = d.conn()
    c.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": "Once upon a time", "max_tokens": 1500, "temperature": 0, "stream": True}),
        headers={"Content-Type": "application/json"})
    r = c.getresponse()
    reads, buf = X.timed_reads(r)
    c.close()
    total = reads[-1][0]
    events = buf.count(b"\n\ndata: ") + 1
    assert events >= 500  # one per token, except bytes held back inside a UTF-8 sequence
    assert len(reads) >= 20, reads[:5]
    # the first tokens arrive long before the generation ends
    assert reads[0][0] < 0.25 * total, (reads[0], total)


def test_empty_prompt_and_max_tokens_zero(daemon):
    st, _, b = X.post_json(daemon.port, "/v1/completions", {"prompt": "", "max_tokens": 5})
    assert st == 400 and b["error"]["code"] == "empty_prompt" and b["error"]["param"] == "prompt"
    b = X.complete(daemon.port, prompt="", max_tokens=0)
    assert b["choices"][0]["text"] == "" and b["usage"]["total_tokens"] == 0
    b = X.complete(daemon.port, prompt="prime", max_tokens=0)
    assert b["usage"] == {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5}


def test_token_id_prompt(daemon):
    a = X.complete(daemon.port, prompt="abc", max_tokens=8, temperature=0)["choices"][0]["text"]
    b = X.complete(daemon.port, prompt=[97, 98, 99], max_tokens=8, temperature=0)["choices"][0]["text"]
    c = X.complete(daemon.port, prompt=[[97, 98, 99]], max_tokens=8, temperature=0)["choices"][0]["text"]
    assert a == b == c

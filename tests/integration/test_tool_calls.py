"""Tool calls on /v1/chat/completions over real HTTP, on the tiny random byte-level model (which
knows nothing about JSON or tools: the call grammar does all the work).

Every tool_choice mode (none, auto both ways, required, a named function), parallel_tool_calls
true and false, arguments that parse and validate against their tool's schema (checked by the
validator of test_structured_output.py and by ajv, tests/clients/validate_schemas.mjs), streamed
tool-call deltas that reassemble to the full answer of the same seed, tool results fed back in
a session with the chat template (the memory equals a fresh session fed the whole
conversation), and the 400s with their param."""
import json
import subprocess

import pytest

import xlharness as X
from test_structured_output import validate

WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 8},
                          "unit": {"enum": ["celsius", "fahrenheit"]},
                          "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "unit"], "additionalProperties": False}
SEARCH = {"type": "object",
          "properties": {"query": {"type": "string", "maxLength": 12},
                         "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                         "tags": {"type": "array", "maxItems": 3,
                                  "items": {"$ref": "#/$defs/tag"}}},
          "required": ["query"], "additionalProperties": False,
          "$defs": {"tag": {"type": "string", "enum": ["news", "web", "code"]}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                            "parameters": WEATHER, "strict": True}},
         {"type": "function", "function": {"name": "search", "parameters": SEARCH}},
         {"type": "function", "function": {"name": "now", "description": "no arguments"}}]
SCHEMA = {"get_weather": WEATHER, "search": SEARCH,
          "now": {"type": "object", "properties": {}, "additionalProperties": False}}
USER = [{"role": "user", "content": "What is the weather in Bath?"}]
# the random model writes lower-case letters for ever: '"', ']' and '}' get a push so strings,
# arrays and objects end (the grammar still decides what is allowed)
BIAS = {str(ord('"')): 4, str(ord("}")): 4, str(ord("]")): 2}
N = 16


def chat(port, messages=USER, **body):
    body = dict(dict(messages=messages, tools=TOOLS, max_tokens=1500, temperature=1.0,
                     logit_bias=dict(BIAS)), **body)
    st, h, b = X.post_json(port, "/v1/chat/completions", body, timeout=120)
    assert st == 200, b
    return b


def calls_of(b):
    m = b["choices"][0]["message"]
    assert b["choices"][0]["finish_reason"] == "tool_calls", b
    assert m["content"] is None and m["role"] == "assistant"
    assert m["tool_calls"], b
    for c in m["tool_calls"]:
        assert c["type"] == "function" and c["id"].startswith("call_")
    return m["tool_calls"]


def check_args(calls, names=None):
    """Each call names a tool (one of names) and its arguments validate; returns the (name,
    arguments) pairs for ajv."""
    out = []
    for c in calls:
        f = c["function"]
        assert f["name"] in (names or SCHEMA), f
        args = json.loads(f["arguments"])
        assert validate(args, SCHEMA[f["name"]]) is None, (f, validate(args, SCHEMA[f["name"]]))
        out.append((f["name"], f["arguments"]))
    return out


@pytest.fixture(scope="module")
def ajv(tmp_path_factory):
    return X.npm_clients(tmp_path_factory, "the ajv validation of tool arguments")


def run_ajv(ajv, pairs, tmp_path):
    node, dest = ajv
    cases = [{"name": n, "schema": s, "outputs": [a for m, a in pairs if m == n]}
             for n, s in SCHEMA.items()]
    cases.append({"name": "control", "schema": WEATHER, "outputs": ['{"city":"x"}']})
    f = tmp_path / "cases.json"
    f.write_text(json.dumps({"cases": cases}))
    r = subprocess.run([node, "validate_schemas.mjs", str(f)], cwd=dest, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    control = report.pop("control")
    assert control["validated"] == 0 and len(control["failures"]) == 1  # ajv can say no
    bad = {n: x["failures"][:2] for n, x in report.items() if x["failures"]}
    assert not bad, bad
    return sum(x["validated"] for x in report.values())


def test_required_calls_parse_and_validate_with_ajv(daemon, ajv, tmp_path):
    pairs, names, counts = [], set(), []
    for seed in range(N):
        calls = calls_of(chat(daemon.port, tool_choice="required", seed=seed))
        assert 1 <= len(calls) <= 8
        assert len({c["id"] for c in calls}) == len(calls)
        counts.append(len(calls))
        pairs += check_args(calls)
        names |= {c["function"]["name"] for c in calls}
    assert names == set(SCHEMA), names  # sampled: every tool is reachable
    assert max(counts) > 1  # parallel_tool_calls defaults to true: several calls in one reply
    assert run_ajv(ajv, pairs, tmp_path) == len(pairs)


def test_named_function_is_the_only_call(daemon):
    for seed in range(8):
        b = chat(daemon.port, seed=seed,
                 tool_choice={"type": "function", "function": {"name": "search"}})
        calls = calls_of(b)
        assert {c["function"]["name"] for c in calls} == {"search"}
        check_args(calls, ["search"])


def test_parallel_tool_calls_false_makes_one_call(daemon):
    for seed in range(N):
        calls = calls_of(chat(daemon.port, tool_choice="required", parallel_tool_calls=False,
                              seed=seed, logit_bias={**BIAS, str(ord(",")): 6}))
        assert len(calls) == 1
        check_args(calls)


def test_none_answers_text(daemon):
    b = chat(daemon.port, tool_choice="none", seed=1, max_tokens=20)
    c = b["choices"][0]
    assert "tool_calls" not in c["message"] and isinstance(c["message"]["content"], str)
    assert c["finish_reason"] in ("stop", "length")


def test_auto_the_first_token_decides(daemon):
    """auto: the reply is a call when the first sampled token is the grammar's '[' (a bias
    moves that choice either way), else text that never turns into a call."""
    open_id = str(ord("["))
    for seed in range(4):
        calls = calls_of(chat(daemon.port, seed=seed, logit_bias={**BIAS, open_id: 100}))
        check_args(calls)
        b = chat(daemon.port, seed=seed, max_tokens=30, logit_bias={**BIAS, open_id: -100})
        c = b["choices"][0]
        assert c["finish_reason"] in ("stop", "length") and "tool_calls" not in c["message"]
        assert not c["message"]["content"].startswith("[")
    # greedy without bias: a text reply, unless '[' is the model's most likely first byte
    b = chat(daemon.port, temperature=0, max_tokens=10, logit_bias={})
    st, h, ref = X.post_json(daemon.port, "/v1/chat/completions",
                             {"messages": USER, "max_tokens": 1, "temperature": 0,
                              "logprobs": True, "top_logprobs": 1})
    first = ref["choices"][0]["logprobs"]["content"][0]["token"]
    assert (b["choices"][0]["finish_reason"] == "tool_calls") == (first == "[")


def reassemble(events):
    """The streamed chunks' tool calls, by index: id, type, name and the arguments joined."""
    calls, finish, content = {}, None, ""
    for ch in X.sse_json(events):
        for choice in ch["choices"]:
            d = choice["delta"]
            content += d.get("content") or ""
            for t in d.get("tool_calls", []):
                if t["index"] not in calls:  # the first delta of a call carries its head
                    assert t["id"] and t["type"] == "function" and t["function"]["name"]
                    assert t["function"]["arguments"] == ""
                    assert t["index"] == len(calls)  # calls open in order
                    calls[t["index"]] = {"id": t["id"], "type": "function",
                                         "function": {"name": t["function"]["name"],
                                                      "arguments": ""}}
                else:
                    assert set(t) == {"index", "function"} and set(t["function"]) == {"arguments"}
                    calls[t["index"]]["function"]["arguments"] += t["function"]["arguments"]
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    return [calls[i] for i in sorted(calls)], finish, content


def test_streamed_deltas_reassemble_to_the_full_answer(daemon):
    for seed in range(6):
        body = dict(messages=USER, tools=TOOLS, tool_choice="required", max_tokens=1500,
                    temperature=1.0, seed=seed, logit_bias=BIAS)
        st, h, full = X.post_json(daemon.port, "/v1/chat/completions", body, timeout=120)
        assert st == 200, full
        st, h, ev = X.stream(daemon.port, "/v1/chat/completions", dict(body, stream=True),
                             timeout=120)
        assert st == 200, ev
        calls, finish, content = reassemble(ev)
        assert finish == "tool_calls" and content == ""
        want = full["choices"][0]["message"]["tool_calls"]
        # ids are made of the response's id (another request, another id) and the call's index
        rid = X.sse_json(ev)[0]["id"].split("-")[-1]
        assert [c.pop("id") for c in calls] == [f"call_{rid}_{k}" for k in range(len(calls))]
        assert calls == [{k: v for k, v in c.items() if k != "id"} for c in want]


def test_streamed_choices_each_reassemble(daemon):
    """n = 2 streamed: each choice's deltas (by choice index, then call index) give that
    choice's calls of the full answer."""
    body = dict(messages=USER, tools=TOOLS, tool_choice="required", max_tokens=1500, seed=9, n=2,
                logit_bias=BIAS)
    st, h, full = X.post_json(daemon.port, "/v1/chat/completions", body, timeout=120)
    st, h, ev = X.stream(daemon.port, "/v1/chat/completions", dict(body, stream=True),
                         timeout=120)
    got, finish = {}, {}
    for ch in X.sse_json(ev):
        for c in ch["choices"]:
            for t in c["delta"].get("tool_calls", []):
                call = got.setdefault(c["index"], {}).setdefault(t["index"], ["", ""])
                if "id" in t:
                    call[0] = t["function"]["name"]
                call[1] += t["function"]["arguments"]
            if c.get("finish_reason"):
                finish[c["index"]] = c["finish_reason"]
    for i, c in enumerate(full["choices"]):
        want = [[t["function"]["name"], t["function"]["arguments"]]
                for t in c["message"]["tool_calls"]]
        assert [got[i][k] for k in sorted(got[i])] == want
        assert finish[i] == c["finish_reason"] == "tool_calls"


def test_stream_cut_by_max_tokens_says_length(daemon):
    st, h, ev = X.stream(daemon.port, "/v1/chat/completions",
                         dict(messages=USER, tools=TOOLS, tool_choice="required", max_tokens=12,
                              seed=3, stream=True, logit_bias=BIAS))
    calls, finish, _ = reassemble(ev)
    assert finish == "length"


def test_tool_results_round_trip_in_a_session(daemon):
    """Turn 1 makes a call; turn 2 sends the history with the assistant's tool_calls and the
    tool's result: only the new messages are fed (full_history), and the session's memory is
    what a fresh session fed the whole conversation holds (same greedy reply and length)."""
    sid = "tools-rt"
    h1 = {"X-Session-Id": sid}
    body = dict(messages=USER, tools=TOOLS, tool_choice="required", max_tokens=1500,
                temperature=0, logit_bias=BIAS)
    st, _, b1 = X.post_json(daemon.port, "/v1/chat/completions", body, headers=h1, timeout=120)
    assert st == 200, b1
    calls = calls_of(b1)
    hist = USER + [{"role": "assistant", "content": None, "tool_calls": calls}]
    hist += [{"role": "tool", "tool_call_id": c["id"], "content": '{"temp": 11}'} for c in calls]
    body2 = dict(body, messages=hist, tool_choice="none", max_tokens=12)
    st, _, b2 = X.post_json(daemon.port, "/v1/chat/completions", body2, headers=h1, timeout=120)
    assert st == 200, b2
    assert b2["xlserve"]["history"] == "full_history" and not b2["xlserve"]["session_reset"]
    fed = "\n" + "".join('Tool: {"temp": 11}\n' for _ in calls) + "Assistant: "
    assert b2["usage"]["prompt_tokens"] == len(fed)
    st, _, ref = X.post_json(daemon.port, "/v1/chat/completions", body2,
                             headers={"X-Session-Id": sid + "-ref"}, timeout=120)
    assert ref["xlserve"]["history"] == "new"
    assert ref["choices"][0]["message"]["content"] == b2["choices"][0]["message"]["content"]
    assert ref["xlserve"]["session_tokens"] == b2["xlserve"]["session_tokens"]
    # the conversation goes on with another call after the tool's result
    hist2 = hist + [{"role": "assistant", "content": b2["choices"][0]["message"]["content"]},
                    {"role": "user", "content": "And tomorrow?"}]
    st, _, b3 = X.post_json(daemon.port, "/v1/chat/completions", dict(body, messages=hist2),
                            headers=h1, timeout=120)
    assert b3["xlserve"]["history"] == "full_history"
    check_args(calls_of(b3))


def test_one_tool_written_arguments_first_still_continues(daemon):
    """One tool: the grammar lets the model write "arguments" before "name"; the client sends
    the call back in OpenAI's shape and the session still recognises its history."""
    one = [TOOLS[0]]
    sid = "tools-one"
    for seed in range(6):
        body = dict(messages=USER, tools=one, tool_choice="required", max_tokens=1500,
                    temperature=1.0, seed=seed, logit_bias=BIAS)
        st, _, b1 = X.post_json(daemon.port, "/v1/chat/completions", body,
                                headers={"X-Session-Id": f"{sid}-{seed}"}, timeout=120)
        calls = calls_of(b1)
        check_args(calls, ["get_weather"])
        hist = USER + [{"role": "assistant", "tool_calls": calls}]
        hist += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls]
        st, _, b2 = X.post_json(daemon.port, "/v1/chat/completions",
                                dict(body, messages=hist, tool_choice="none", max_tokens=4),
                                headers={"X-Session-Id": f"{sid}-{seed}"}, timeout=120)
        assert st == 200 and b2["xlserve"]["history"] == "full_history", b2


def test_a_cut_call_sent_back_continues_the_session(daemon):
    """max_tokens cuts a call: its arguments are not JSON, and sent back as answered they
    still render to what the memory holds (content parts and tool_calls together too)."""
    h = {"X-Session-Id": "tools-cut"}
    body = dict(messages=USER, tools=TOOLS, tool_choice="required", max_tokens=30, seed=4,
                logit_bias=BIAS)
    st, _, b1 = X.post_json(daemon.port, "/v1/chat/completions", body, headers=h)
    c = b1["choices"][0]
    assert c["finish_reason"] == "length" and c["message"]["tool_calls"], b1
    with pytest.raises(ValueError):
        json.loads(c["message"]["tool_calls"][-1]["function"]["arguments"])
    hist = USER + [{"role": "assistant", "content": [], "tool_calls": c["message"]["tool_calls"]},
                   {"role": "user", "content": "Go on."}]
    st, _, b2 = X.post_json(daemon.port, "/v1/chat/completions",
                            dict(body, messages=hist, tool_choice="none", max_tokens=3), headers=h)
    assert st == 200 and b2["xlserve"]["history"] == "full_history", b2


def test_several_choices_each_make_calls(daemon):
    b = chat(daemon.port, tool_choice="required", n=3, seed=5)
    assert len(b["choices"]) == 3
    for c in b["choices"]:
        assert c["finish_reason"] == "tool_calls"
        check_args(c["message"]["tool_calls"])
    ids = [t["id"] for c in b["choices"] for t in c["message"]["tool_calls"]]
    assert len(set(ids)) == len(ids)


BAD = [
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "x", "parameters": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "(?=x)"}}}}}]},
     "tools[0].function.parameters.properties.a.pattern"),
    ({"tools": [{"type": "function", "function": {"name": "x", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "minimum": 5,
                                               "maximum": 1}}}}}]},
     "tools[0].function.parameters.properties.a"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]},
     "tools[0].function.name"),
    ({"tools": [TOOLS[0], TOOLS[0]]}, "tools[1]"),
    ({"tools": "get_weather"}, "tools"),
    ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {
        "name": "get_weather", "arguments": {"city": "x"}}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {
        "name": "a b", "arguments": "{}"}}]}]},
     "messages[0].tool_calls[0].function.name"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": [{"id": "c"}]}]},
     "messages[0].tool_calls"),
    ({"functions": [{"name": "f"}]}, "functions"),
]


@pytest.mark.parametrize("fields,param", BAD, ids=[p for _, p in BAD])
def test_bad_tool_requests_are_400_naming_the_param(daemon, fields, param):
    body = dict(messages=USER, tools=TOOLS, max_tokens=5)
    body.update(fields)
    st, h, b = X.post_json(daemon.port, "/v1/chat/completions", body)
    assert st == 400, b
    assert b["error"]["param"].startswith(param), b
    assert b["error"]["type"] == "invalid_request_error"


def test_tools_on_completions_are_refused(daemon):
    st, h, b = X.post_json(daemon.port, "/v1/completions",
                           {"prompt": "x", "tools": TOOLS, "max_tokens": 2})
    assert st == 400 and b["error"]["param"] == "tools", b


def test_word_level_model_refuses_tools_unless_none(start_daemon, tmp_path):
    dm = start_daemon(X.write_tiny_word_model(tmp_path / "words"))
    msgs = [{"role": "user", "content": "w1 w2"}]
    st, h, b = X.post_json(dm.port, "/v1/chat/completions",
                           {"messages": msgs, "tools": TOOLS, "max_tokens": 2})
    assert st == 400 and b["error"]["param"] == "tools", b
    assert "byte-level" in b["error"]["message"]
    st, h, b = X.post_json(dm.port, "/v1/chat/completions",
                           {"messages": msgs, "tools": TOOLS, "tool_choice": "none",
                            "max_tokens": 2})
    assert st == 200 and "tool_calls" not in b["choices"][0]["message"], b

"""The Responses API over real HTTP: POST /v1/responses (string and item input, instructions,
previous_response_id chains that feed only the new input, the 409 of a superseded response,
store: false, max_output_tokens, logprobs, text.format json_schema), the streaming event
sequence, GET / DELETE /v1/responses/{id}, its input_items, cancel, and the errors."""
import json

import xlharness as X

BASE = {"model": "tiny", "max_output_tokens": 12, "seed": 5}
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string",
                                                                    "maxLength": 12}},
                          "required": ["city"], "additionalProperties": False}}


def create(port, **body):
    st, _, b = X.post_json(port, "/v1/responses", {**BASE, **body})
    assert st == 200, b
    return b


def text_of(resp):
    (item,) = resp["output"]
    assert item["type"] == "message" and item["role"] == "assistant"
    (part,) = item["content"]
    assert part["type"] == "output_text"
    return part["text"]


def err(port, method, path, body=None):
    st, _, b = X.request(port, method, path, body)
    return st, json.loads(b)["error"]


def test_create_answers_a_response_object(daemon):
    r = create(daemon.port, input="Hello there", instructions="Be brief")
    assert r["object"] == "response" and r["id"].startswith("resp_")
    assert r["status"] == "incomplete" and r["incomplete_details"] == {"reason": "max_output_tokens"}
    assert r["output"][0]["status"] == "incomplete" and r["model"] == "tiny"
    assert r["instructions"] == "Be brief" and r["store"] is True
    u = r["usage"]
    assert u["output_tokens"] == 12 and u["total_tokens"] == u["input_tokens"] + 12
    # bytes model: the rendered system + user messages are at least their characters
    assert u["input_tokens"] > len("Hello there") + len("Be brief")
    assert len(text_of(r).encode()) <= 12 * 3
    assert r["xlserve"]["session_tokens"] == u["total_tokens"]


def test_string_and_item_input_feed_the_same(daemon):
    a = create(daemon.port, input="Same words")
    b = create(daemon.port, input=[{"role": "user",
                                    "content": [{"type": "input_text", "text": "Same "},
                                                {"type": "input_text", "text": "words"}]}])
    assert a["usage"] == b["usage"] and text_of(a) == text_of(b)  # seeded


def test_previous_response_id_feeds_only_the_new_input(daemon):
    p = daemon.port
    r1 = create(p, input="Hello there")
    r2 = create(p, input="And more", previous_response_id=r1["id"])
    assert r2["previous_response_id"] == r1["id"]
    assert r2["xlserve"]["session_id"] == r1["xlserve"]["session_id"]
    # the session grew by this turn's input and output only
    assert (r2["xlserve"]["session_tokens"]
            == r1["xlserve"]["session_tokens"] + r2["usage"]["total_tokens"])
    # the same conversation sent whole feeds far more
    full = create(p, input=[{"role": "user", "content": "Hello there"},
                            {"role": "assistant", "content": text_of(r1)},
                            {"role": "user", "content": "And more"}])
    assert r2["usage"]["input_tokens"] < full["usage"]["input_tokens"] - len("Hello there")
    r3 = create(p, input="Third", previous_response_id=r2["id"])
    assert (r3["xlserve"]["session_tokens"]
            == r2["xlserve"]["session_tokens"] + r3["usage"]["total_tokens"])
    assert r3["xlserve"]["session_turns"] == 3


def test_continuing_a_superseded_response_is_409(daemon):
    p = daemon.port
    r1 = create(p, input="Hello")
    create(p, input="next", previous_response_id=r1["id"])
    st, e = err(p, "POST", "/v1/responses", {**BASE, "input": "branch",
                                             "previous_response_id": r1["id"]})
    assert st == 409 and e["code"] == "response_superseded"
    assert e["param"] == "previous_response_id" and "moved on" in e["message"]


def test_store_false_keeps_no_object_and_no_session(daemon):
    p = daemon.port
    _, _, before = X.request(p, "GET", "/v1/sessions")
    r = create(p, input="Not kept", store=False)
    assert r["store"] is False and r["xlserve"]["session_id"] is None
    st, e = err(p, "GET", "/v1/responses/" + r["id"])
    assert st == 404 and e["code"] == "response_not_found"
    _, _, after = X.request(p, "GET", "/v1/sessions")
    assert len(json.loads(after)["data"]) == len(json.loads(before)["data"])
    st, e = err(p, "POST", "/v1/responses", {**BASE, "input": "x", "previous_response_id": r["id"]})
    assert st == 404 and e["param"] == "previous_response_id"


def test_store_false_continuation_leaves_the_session_as_it_was(daemon):
    p = daemon.port
    r1 = create(p, input="Hello")
    a = create(p, input="Try", previous_response_id=r1["id"], store=False)
    b = create(p, input="Try", previous_response_id=r1["id"], store=False)
    assert text_of(a) == text_of(b) and a["usage"] == b["usage"]  # seeded, same memory
    # the stored chain was not advanced: r1 is still its latest turn, continued as a's input was
    c = create(p, input="Try", previous_response_id=r1["id"])
    assert text_of(c) == text_of(a)
    assert (c["xlserve"]["session_tokens"]
            == r1["xlserve"]["session_tokens"] + c["usage"]["total_tokens"])


def test_get_delete_and_input_items(daemon):
    p = daemon.port
    r = create(p, input=[{"role": "developer", "content": "Sys"},
                         {"type": "message", "role": "user", "content": "One"},
                         {"role": "user", "content": [{"type": "input_text", "text": "Two"}]}])
    st, _, b = X.request(p, "GET", "/v1/responses/" + r["id"])
    assert st == 200 and json.loads(b) == r
    st, _, b = X.request(p, "GET", "/v1/responses/%s/input_items" % r["id"])
    items = json.loads(b)
    assert st == 200 and items["object"] == "list" and not items["has_more"]
    texts = [i["content"][0]["text"] for i in items["data"]]
    assert texts == ["Two", "One", "Sys"]  # newest first, as OpenAI lists them
    assert [i["role"] for i in items["data"]] == ["user", "user", "developer"]
    assert items["first_id"] == items["data"][0]["id"] and items["last_id"] == items["data"][-1]["id"]
    st, _, b = X.request(p, "GET", "/v1/responses/%s/input_items?order=asc&limit=2" % r["id"])
    page = json.loads(b)
    assert [i["content"][0]["text"] for i in page["data"]] == ["Sys", "One"] and page["has_more"]
    st, _, b = X.request(p, "GET", "/v1/responses/%s/input_items?order=asc&after=%s"
                         % (r["id"], page["last_id"]))
    assert [i["content"][0]["text"] for i in json.loads(b)["data"]] == ["Two"]
    st, e = err(p, "GET", "/v1/responses/%s/input_items?limit=0" % r["id"])
    assert st == 400 and e["param"] == "limit"
    st, e = err(p, "POST", "/v1/responses/%s/cancel" % r["id"])
    assert st == 400 and "background" in e["message"]
    st, _, b = X.request(p, "DELETE", "/v1/responses/" + r["id"])
    assert st == 200 and json.loads(b) == {"id": r["id"], "object": "response", "deleted": True}
    for method, path in (("GET", ""), ("DELETE", ""), ("GET", "/input_items"),
                         ("POST", "/cancel")):
        st, e = err(p, method, "/v1/responses/" + r["id"] + path)
        assert st == 404 and e["code"] == "response_not_found", (method, path)


def test_unknown_ids_are_404(daemon):
    st, e = err(daemon.port, "GET", "/v1/responses/resp_nope")
    assert st == 404 and e["param"] == "response_id"
    st, e = err(daemon.port, "POST", "/v1/responses", {**BASE, "input": "x",
                                                      "previous_response_id": "resp_nope"})
    assert st == 404 and e["param"] == "previous_response_id"


def test_bad_requests_name_the_field(daemon):
    cases = [
        ({"input": None}, "input"),
        ({"input": []}, "input"),
        ({"input": 3}, "input"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
         "input[0].content[0]"),
        ({"input": [{"role": "user", "content": 5}]}, "input[0].content"),
        ({"input": [{"type": "function_call_output", "output": "1"}]}, "input[0].call_id"),
        ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]},
         "input[0].arguments"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input[0]"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
        ({"input": "x", "instructions": 1}, "instructions"),
        ({"input": "x", "max_output_tokens": -1}, "max_output_tokens"),
        ({"input": "x", "temperature": 9}, "temperature"),
        ({"input": "x", "store": "yes"}, "store"),
        ({"input": "x", "background": True}, "background"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools"),
        ({"input": "x", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}},
         "tool_choice"),
        ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type"),
        ({"input": "x", "text": {"format": {"type": "json_schema", "name": "s"}}},
         "text.format"),
        ({"input": "x", "include": "everything"}, "include"),
        ({"input": "x", "metadata": {"k": 1}}, "metadata"),
        ({"input": "x", "model": "other"}, "model"),
    ]
    for body, param in cases:
        st, e = err(daemon.port, "POST", "/v1/responses", {**BASE, **body})
        assert 400 <= st < 500 and e["param"] is not None, (body, st, e)
        assert e["param"].startswith(param), (body, e)
    st, e = err(daemon.port, "POST", "/v1/responses", b"{not json")
    assert st == 400 and e["code"] == "invalid_json"


def test_logprobs_by_include(daemon):
    r = create(daemon.port, input="Hi", include=["message.output_text.logprobs"], top_logprobs=2)
    lp = r["output"][0]["content"][0]["logprobs"]
    assert len(lp) == r["usage"]["output_tokens"]
    for t in lp:
        assert t["logprob"] <= 0 and len(t["top_logprobs"]) == 2
        assert t["top_logprobs"][0]["logprob"] >= t["logprob"]
    plain = create(daemon.port, input="Hi")
    assert plain["output"][0]["content"][0]["logprobs"] == []


def test_text_format_json_schema(daemon):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}},
              "required": ["n", "ok"], "additionalProperties": False}
    r = create(daemon.port, input="Give JSON", max_output_tokens=200,
               text={"format": {"type": "json_schema", "name": "t", "schema": schema,
                                "strict": True}})
    assert r["status"] == "completed" and r["text"]["format"]["type"] == "json_schema"
    doc = json.loads(text_of(r))
    assert set(doc) == {"n", "ok"} and isinstance(doc["n"], int) and isinstance(doc["ok"], bool)


def test_stream_event_sequence(daemon):
    st, h, ev = X.stream(daemon.port, "/v1/responses",
                         {**BASE, "input": "Stream me", "stream": True,
                          "include": ["message.output_text.logprobs"]})
    assert st == 200 and h["content-type"].startswith("text/event-stream")
    events = X.sse_json(ev)
    types = [e["type"] for e in events]
    n_delta = types.count("response.output_text.delta")
    assert n_delta >= 1
    assert types == (["response.created", "response.in_progress", "response.output_item.added",
                      "response.content_part.added"] + ["response.output_text.delta"] * n_delta
                     + ["response.output_text.done", "response.content_part.done",
                        "response.output_item.done", "response.incomplete"])
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["response"]["status"] == "in_progress"
    final = events[-1]["response"]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    done = events[-4]
    assert deltas == done["text"] == text_of(final)
    assert sum(len(e["logprobs"]) for e in events[4:4 + n_delta]) == 12 == len(done["logprobs"])
    assert final["usage"]["output_tokens"] == 12
    item_ids = {e["item_id"] for e in events if "item_id" in e}
    assert item_ids == {final["output"][0]["id"]}
    # the SSE event names are the types
    raw = [d for _, d in ev]
    assert len(raw) == len(events)
    # the stream's response is stored as answered, and it is what a plain request makes
    st, _, b = X.request(daemon.port, "GET", "/v1/responses/" + final["id"])
    assert st == 200 and json.loads(b) == final
    plain = create(daemon.port, input="Stream me")
    assert text_of(plain) == deltas


def test_stream_sse_event_lines(daemon):
    """Each event's `event:` line names its type (as the OpenAI SDK's SSE reader pairs them)."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=60)
    c.request("POST", "/v1/responses", body=json.dumps({**BASE, "input": "x", "stream": True,
                                                         "max_output_tokens": 3}),
              headers={"Content-Type": "application/json"})
    body = c.getresponse().read().decode()
    c.close()
    frames = [f for f in body.split("\n\n") if f.strip()]
    for f in frames:
        ev_line, data_line = f.split("\n")
        assert ev_line.startswith("event: ") and data_line.startswith("data: ")
        assert json.loads(data_line[6:])["type"] == ev_line[7:]
    assert "[DONE]" not in body


def test_stream_completed_with_stop(daemon):
    """A json_schema stream ends when the document does: status completed."""
    schema = {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"],
              "additionalProperties": False}
    st, _, ev = X.stream(daemon.port, "/v1/responses",
                         {**BASE, "input": "j", "stream": True, "max_output_tokens": 100,
                          "text": {"format": {"type": "json_schema", "name": "a",
                                              "schema": schema}}})
    events = X.sse_json(ev)
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["status"] == "completed"
    assert json.loads(text_of(events[-1]["response"]))["a"] in (True, False)


def test_cancel_a_response_being_made(daemon):
    """A long stream: GET shows it in progress, cancel stops it; the stream ends with the
    response cancelled, which is stored and can be continued."""
    import http.client
    p = daemon.port
    c = http.client.HTTPConnection("127.0.0.1", p, timeout=60)
    c.request("POST", "/v1/responses",
              body=json.dumps({**BASE, "input": "long", "stream": True,
                               "max_output_tokens": 1000000}),
              headers={"Content-Type": "application/json"})
    resp = c.getresponse()
    assert resp.status == 200
    got = []

    def until_delta(data):
        got.append(json.loads(data))
        return got[-1]["type"] != "response.output_text.delta"

    X.read_sse(resp, on_event=until_delta)
    rid = got[0]["response"]["id"]
    st, _, b = X.request(p, "GET", "/v1/responses/" + rid)
    assert st == 200 and json.loads(b)["status"] == "in_progress"
    st, _, b = X.request(p, "POST", "/v1/responses/%s/cancel" % rid)
    assert st == 200 and json.loads(b)["status"] == "cancelled", b
    rest = X.sse_json(X.read_sse(resp))
    c.close()
    assert rest[-1]["type"] == "response.incomplete"
    final = rest[-1]["response"]
    assert final["status"] == "cancelled" and final["usage"]["output_tokens"] < 1000000
    st, _, b = X.request(p, "GET", "/v1/responses/" + rid)
    assert st == 200 and json.loads(b) == final
    nxt = create(p, input="after", previous_response_id=rid)
    assert (nxt["xlserve"]["session_tokens"]
            == final["xlserve"]["session_tokens"] + nxt["usage"]["total_tokens"])
    st, e = err(p, "POST", "/v1/responses/%s/cancel" % rid)
    assert st == 400


def chain_checks(p1, p2):
    """A response made on daemon port p1 is read, listed and continued on daemon port p2."""
    r1 = create(p1, input="Kept across", instructions="Be brief")
    st, _, b = X.request(p2, "GET", "/v1/responses/" + r1["id"])
    assert st == 200 and json.loads(b) == r1
    st, _, b = X.request(p2, "GET", "/v1/responses/%s/input_items" % r1["id"])
    assert [i["content"][0]["text"] for i in json.loads(b)["data"]] == ["Kept across"]
    r2 = create(p2, input="Then", previous_response_id=r1["id"])
    assert r2["xlserve"]["session_id"] == r1["xlserve"]["session_id"]
    assert (r2["xlserve"]["session_tokens"]
            == r1["xlserve"]["session_tokens"] + r2["usage"]["total_tokens"])
    return r1, r2


def test_responses_survive_a_restart_with_sqlite(start_daemon, tiny_model, tmp_path):
    args = ["--state-dir", str(tmp_path / "state"), "--max-tokens-limit", "1000000"]
    d1 = start_daemon(tiny_model, *args)
    r1 = create(d1.port, input="Before the restart")
    assert d1.stop() == 0
    d2 = X.Daemon(tiny_model, args)  # killed below: not the fixture's (it wants exit 0)
    r1_, r2 = chain_checks(d2.port, d2.port)  # a chain made after a restart too
    st, _, b = X.request(d2.port, "GET", "/v1/responses/" + r1["id"])
    assert st == 200 and json.loads(b) == r1
    r3 = create(d2.port, input="After the restart", previous_response_id=r1["id"])
    assert (r3["xlserve"]["session_tokens"]
            == r1["xlserve"]["session_tokens"] + r3["usage"]["total_tokens"])
    d2.proc.kill()  # kill -9: what was answered was committed with its turn
    d2.stop()
    d3 = start_daemon(tiny_model, *args)
    for r in (r1_, r2, r3):
        st, _, b = X.request(d3.port, "GET", "/v1/responses/" + r["id"])
        assert st == 200 and json.loads(b) == r
    st, e = err(d3.port, "POST", "/v1/responses", {**BASE, "input": "x",
                                                  "previous_response_id": r1["id"]})
    assert st == 409 and e["code"] == "response_superseded"  # r3 moved the session on
    st, _, _ = X.request(d3.port, "DELETE", "/v1/responses/" + r3["id"])
    assert st == 200
    assert d3.stop() == 0
    d4 = start_daemon(tiny_model, *args)
    st, e = err(d4.port, "GET", "/v1/responses/" + r3["id"])
    assert st == 404 and e["code"] == "response_not_found"


def test_responses_across_replicas_sharing_redis(start_daemon, tiny_model, tmp_path):
    import shutil
    import subprocess
    redis = shutil.which("redis-server")
    if redis is None:
        import pytest
        pytest.skip("redis-server is not installed (tools/install-deps.sh test installs it)")
    port = X.free_port()
    (tmp_path / "redis").mkdir()
    srv = subprocess.Popen([redis, "--bind", "127.0.0.1", "--port", str(port), "--dir",
                            str(tmp_path / "redis"), "--save", "", "--appendonly", "no"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        import socket

        def up():
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False
        X.wait_until(up, 20, "redis-server listens")
        args = ["--store", "redis", "--redis-url", "redis://127.0.0.1:%d/0" % port,
                "--redis-prefix", "r", "--max-tokens-limit", "1000000"]
        a, b = start_daemon(tiny_model, *args), start_daemon(tiny_model, *args)
        r1, r2 = chain_checks(a.port, b.port)
        # a moved the session on at b: continuing r1 at a is 409, r2 at a continues
        st, e = err(a.port, "POST", "/v1/responses", {**BASE, "input": "x",
                                                     "previous_response_id": r1["id"]})
        assert st == 409 and e["code"] == "response_superseded"
        r3 = create(a.port, input="Back at a", previous_response_id=r2["id"])
        assert (r3["xlserve"]["session_tokens"]
                == r2["xlserve"]["session_tokens"] + r3["usage"]["total_tokens"])
        st, _, _ = X.request(b.port, "DELETE", "/v1/responses/" + r3["id"])
        st2, e = err(a.port, "GET", "/v1/responses/" + r3["id"])
        assert st == 200 and st2 == 404
    finally:
        srv.terminate()
        srv.wait(timeout=20)


def test_tool_call_then_its_output_continues(daemon):
    """tool_choice required: the output is a function_call item whose arguments validate; its
    result sent back as a function_call_output item continues the session."""
    p = daemon.port
    r1 = create(p, input="Weather in Paris?", tools=[WEATHER], tool_choice="required",
                parallel_tool_calls=False, max_output_tokens=200)
    assert r1["status"] == "completed" and r1["tools"] == [WEATHER]
    (call,) = r1["output"]
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    assert call["status"] == "completed" and call["id"].startswith("fc_")
    args = json.loads(call["arguments"])
    assert set(args) == {"city"} and isinstance(args["city"], str) and len(args["city"]) <= 12
    r2 = create(p, previous_response_id=r1["id"], tools=[WEATHER], tool_choice="none",
                input=[{"type": "function_call_output", "call_id": call["call_id"],
                        "output": '{"temp": 21}'}])
    assert r2["output"][0]["type"] == "message"
    assert (r2["xlserve"]["session_tokens"]
            == r1["xlserve"]["session_tokens"] + r2["usage"]["total_tokens"])
    st, _, b = X.request(p, "GET", "/v1/responses/%s/input_items" % r2["id"])
    (item,) = json.loads(b)["data"]
    assert item["type"] == "function_call_output" and item["call_id"] == call["call_id"]
    # the same conversation sent whole: the call and its output as items
    full = create(p, tools=[WEATHER], tool_choice="none", store=False,
                  input=[{"role": "user", "content": "Weather in Paris?"},
                         {"type": "function_call", "call_id": call["call_id"],
                          "name": call["name"], "arguments": call["arguments"]},
                         {"type": "function_call_output", "call_id": call["call_id"],
                          "output": '{"temp": 21}'}])
    assert full["output"][0]["type"] == "message"
    assert full["usage"]["input_tokens"] > r2["usage"]["input_tokens"]


def test_tool_call_stream(daemon):
    st, _, ev = X.stream(daemon.port, "/v1/responses",
                         {**BASE, "input": "Weather?", "stream": True, "tools": [WEATHER],
                          "tool_choice": {"type": "function", "name": "get_weather"},
                          "max_output_tokens": 300})
    events = X.sse_json(ev)
    types = [e["type"] for e in events]
    final = events[-1]["response"]
    calls = final["output"]
    assert calls and all(c["type"] == "function_call" for c in calls)  # parallel: one or more
    assert types == (["response.created", "response.in_progress"]
                     + ["response.output_item.added", "response.function_call_arguments.delta",
                        "response.function_call_arguments.done", "response.output_item.done"]
                     * len(calls) + ["response.completed"]), types
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    for k, call in enumerate(calls):
        added, delta, done, item_done = events[2 + 4 * k: 6 + 4 * k]
        assert added["output_index"] == delta["output_index"] == item_done["output_index"] == k
        assert delta["delta"] == done["arguments"] == call["arguments"]
        assert added["item"]["id"] == delta["item_id"] == done["item_id"] == call["id"]
        assert item_done["item"] == call and isinstance(json.loads(call["arguments"])["city"], str)

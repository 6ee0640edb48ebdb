"""The history rule of chat sessions (history "auto"), one test per row of the table in
docs/sessions.md: how a request's messages are matched against the session's transcript,
over real HTTP. A request that continues the session must leave its memory exactly as a fresh
session fed the whole conversation would (same greedy reply, same token count); a reset says so
with `X-Session-Reset: 1`."""
import http.client
import json
import time

import xlharness as X

SYS = {"role": "system", "content": "You are terse."}
U1 = {"role": "user", "content": "Hello"}
U2 = {"role": "user", "content": "How are you?"}
U3 = {"role": "user", "content": "Bye"}


def chat(port, sid, messages, **body):
    h = {"X-Session-Id": sid} if sid else {}
    body.setdefault("max_tokens", 6)
    st, hdr, b = X.post_json(port, "/v1/chat/completions",
                             dict(messages=messages, temperature=0, **body), headers=h)
    assert st == 200, b
    return hdr, b


def reply(b):
    return {"role": "assistant", "content": b["choices"][0]["message"]["content"]}


def session(port, sid):
    st, s = X.get_session(port, sid)
    assert st == 200, s
    return s


def conversation(port, sid, first):
    """Two turns: first, then U2 (full history). Returns the full history sent so far, with the
    replies, and the session's token count."""
    _, b1 = chat(port, sid, first)
    hist = first + [reply(b1), U2]
    _, b2 = chat(port, sid, hist)
    assert b2["xlserve"]["history"] == "full_history"
    return hist + [reply(b2)], b2["xlserve"]["session_tokens"]


def assert_same_as_fresh(port, b, full_history, ref_sid):
    """b (a turn that continued its session) equals the whole conversation fed to a new one."""
    _, ref = chat(port, ref_sid, full_history)
    assert ref["xlserve"]["history"] == "new"
    assert ref["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    assert ref["xlserve"]["session_tokens"] == b["xlserve"]["session_tokens"]


def test_row_empty_session_feeds_everything(daemon):
    h, b = chat(daemon.port, "hist-new", [SYS, U1])
    assert b["xlserve"]["history"] == "new" and "x-session-reset" not in h
    assert b["usage"]["prompt_tokens"] == len("You are terse.\n\nUser: Hello\nAssistant: ")


def test_row_full_history_feeds_only_the_new_messages(daemon):
    hist, t = conversation(daemon.port, "hist-full", [SYS, U1])
    h, b = chat(daemon.port, "hist-full", hist + [U3])
    assert b["xlserve"]["history"] == "full_history" and "x-session-reset" not in h
    assert b["usage"]["prompt_tokens"] == len("\nUser: Bye\nAssistant: ")
    assert b["xlserve"]["session_tokens"] == t + b["usage"]["total_tokens"]
    assert_same_as_fresh(daemon.port, b, hist + [U3], "hist-full-ref")


def test_row_trimmed_front_keeping_the_system_message_continues(daemon):
    """A client that drops old turns but keeps its system prompt keeps its session: nothing is
    fed twice, and the memory holds the whole conversation (not the trimmed one)."""
    hist, t = conversation(daemon.port, "hist-trim", [SYS, U1])
    trimmed = [SYS] + hist[3:] + [U3]  # drops U1 and its reply
    h, b = chat(daemon.port, "hist-trim", trimmed)
    assert b["xlserve"]["history"] == "trimmed_history" and "x-session-reset" not in h
    assert b["usage"]["prompt_tokens"] == len("\nUser: Bye\nAssistant: ")
    assert b["xlserve"]["session_tokens"] == t + b["usage"]["total_tokens"]
    assert session(daemon.port, "hist-trim")["messages"] == len(hist) + 2
    assert_same_as_fresh(daemon.port, b, hist + [U3], "hist-trim-ref")


def test_row_trimmed_front_without_system_message_continues(daemon):
    hist, t = conversation(daemon.port, "hist-trim2", [SYS, U1])
    trimmed = hist[-2:] + [U3]  # only the last exchange, then the new message
    h, b = chat(daemon.port, "hist-trim2", trimmed)
    assert b["xlserve"]["history"] == "trimmed_history" and "x-session-reset" not in h
    assert b["usage"]["prompt_tokens"] == len("\nUser: Bye\nAssistant: ")
    assert_same_as_fresh(daemon.port, b, hist + [U3], "hist-trim2-ref")


def test_row_previous_turn_cut_resets(daemon):
    """A turn cut short in its prompt (the client left during the prefill) leaves part of a
    request in the memory: the next full-history request resets rather than continuing."""
    sid = "hist-cut"
    _, b1 = chat(daemon.port, sid, [U1])
    long_msg = {"role": "user", "content": "lorem ipsum " * 5000}  # 60k tokens: a long prefill
    fed_before = X.metric(daemon.port, "xlserve_prompt_tokens_total")
    c = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=30)
    c.request("POST", "/v1/chat/completions",
              body=json.dumps({"messages": [U1, reply(b1), long_msg], "stream": True,
                               "max_tokens": 5}).encode(),
              headers={"Content-Type": "application/json", "X-Session-Id": sid})
    r = c.getresponse()
    assert r.status == 200
    X.read_sse(r, on_event=lambda d: False)  # the role chunk, sent before the prefill starts
    # cut once the prefill has fed a chunk (cut before that, nothing of the turn is in the
    # memory and the session rightly stays in step: a loaded machine can start it late)
    deadline = time.monotonic() + 30
    while (time.monotonic() < deadline and
           X.metric(daemon.port, "xlserve_prompt_tokens_total") == fed_before):
        time.sleep(0.01)
    c.close()  # cut
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and session(daemon.port, sid)["busy"]:
        time.sleep(0.02)
    assert session(daemon.port, sid)["mode"] == "desync"
    h, b = chat(daemon.port, sid, [U1, reply(b1), U2])
    assert h.get("x-session-reset") == "1" and b["xlserve"]["history"] == "reset"
    assert b["xlserve"]["session_tokens"] == b["usage"]["total_tokens"]


def test_row_edited_first_message_resets(daemon):
    """The edited first message is not taken as new messages: both versions of the
    conversation never sit in the memory together."""
    hist, t = conversation(daemon.port, "hist-edit1", [U1])
    edited = [{"role": "user", "content": "Hello there"}] + hist[1:] + [U3]
    h, b = chat(daemon.port, "hist-edit1", edited)
    assert h.get("x-session-reset") == "1" and b["xlserve"]["history"] == "reset"
    assert b["xlserve"]["session_reset"] is True
    assert b["xlserve"]["session_tokens"] == b["usage"]["total_tokens"]
    assert session(daemon.port, "hist-edit1")["messages"] == len(edited) + 1
    assert_same_as_fresh(daemon.port, b, edited, "hist-edit1-ref")


def test_row_edited_reply_resets(daemon):
    hist, t = conversation(daemon.port, "hist-edit2", [SYS, U1])
    edited = list(hist)
    edited[2] = {"role": "assistant", "content": hist[2]["content"] + "x"}
    h, b = chat(daemon.port, "hist-edit2", edited + [U3])
    assert h.get("x-session-reset") == "1" and b["xlserve"]["history"] == "reset"
    assert b["xlserve"]["session_tokens"] == b["usage"]["total_tokens"]


def test_row_other_system_message_resets(daemon):
    hist, t = conversation(daemon.port, "hist-sys", [SYS, U1])
    h, b = chat(daemon.port, "hist-sys", [{"role": "system", "content": "Be long."}, U3])
    assert h.get("x-session-reset") == "1" and b["xlserve"]["history"] == "reset"


def test_row_same_history_again_resets(daemon):
    """The conversation as it stood before the last reply (regenerate) replays from scratch."""
    _, b1 = chat(daemon.port, "hist-again", [SYS, U1])
    h, b2 = chat(daemon.port, "hist-again", [SYS, U1])
    assert h.get("x-session-reset") == "1" and b2["xlserve"]["history"] == "reset"
    assert b2["choices"][0]["message"]["content"] == b1["choices"][0]["message"]["content"]
    assert b2["xlserve"]["session_tokens"] == b1["xlserve"]["session_tokens"]


def test_row_only_new_user_messages_are_appended(daemon):
    hist, t = conversation(daemon.port, "hist-app", [SYS, U1])
    h, b = chat(daemon.port, "hist-app", [U3])
    assert b["xlserve"]["history"] == "append" and "x-session-reset" not in h
    assert b["usage"]["prompt_tokens"] == len("\nUser: Bye\nAssistant: ")
    assert b["xlserve"]["session_tokens"] == t + b["usage"]["total_tokens"]
    assert_same_as_fresh(daemon.port, b, hist + [U3], "hist-app-ref")


def test_row_new_message_equal_to_the_first_is_appended(daemon):
    """A new message equal in text to the conversation's first one is a new message: the
    session keeps its context."""
    _, b1 = chat(daemon.port, "hist-eq", [U1])
    t = b1["xlserve"]["session_tokens"]
    h, b = chat(daemon.port, "hist-eq", [U1])
    assert b["xlserve"]["history"] == "append" and "x-session-reset" not in h
    assert b["xlserve"]["session_tokens"] == t + b["usage"]["total_tokens"]
    assert_same_as_fresh(daemon.port, b, [U1, reply(b1), U1], "hist-eq-ref")


def test_row_after_raw_completions_messages_are_appended(daemon):
    a = X.complete(daemon.port, "hist-raw", prompt="Once upon a time", max_tokens=4, temperature=0)
    t = a["xlserve"]["session_tokens"]
    h, b = chat(daemon.port, "hist-raw", [SYS, U1])
    assert b["xlserve"]["history"] == "append" and "x-session-reset" not in h
    assert b["xlserve"]["session_tokens"] == t + b["usage"]["total_tokens"]


def test_row_history_full_takes_no_trimmed_history(daemon):
    hist, t = conversation(daemon.port, "hist-mfull", [SYS, U1])
    h, b = chat(daemon.port, "hist-mfull", hist[-2:] + [U3], history="full")
    assert h.get("x-session-reset") == "1" and b["xlserve"]["history"] == "reset"
    h, b = chat(daemon.port, "hist-mfull", hist[-2:] + [U3, reply(b), U1], history="full")
    assert b["xlserve"]["history"] == "full_history" and "x-session-reset" not in h


def test_row_history_append_always_appends(daemon):
    hist, t = conversation(daemon.port, "hist-mapp", [SYS, U1])
    h, b = chat(daemon.port, "hist-mapp", [SYS, U1], history="append")
    assert b["xlserve"]["history"] == "append" and "x-session-reset" not in h
    assert b["xlserve"]["session_tokens"] == t + b["usage"]["total_tokens"]

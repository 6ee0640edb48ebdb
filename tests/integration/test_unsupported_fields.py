"""No silent ignoring: a request field whose meaning xlserve does not implement and that would
change the output (llama.cpp's and vLLM's extensions, tool_choice without tools) is answered 400
naming it; at its neutral value it passes; OpenAI's optional fields that change nothing pass;
a `model` other than the served one is 404 model_not_found, as GET /v1/models/{id} says."""
import pytest

import xlharness as X

C, CH = "/v1/completions", "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("path,extra,param", [
    (C, {"n_predict": 5}, "n_predict"),
    (CH, {"n_predict": 5}, "n_predict"),
    (C, {"mirostat": 2}, "mirostat"),
    (C, {"grammar": "root ::= \"a\""}, "grammar"),
    (C, {"typical_p": 0.5}, "typical_p"),
    (C, {"repeat_penalty": 1.3}, "repeat_penalty"),
    (C, {"ignore_eos": True}, "ignore_eos"),
    (C, {"min_tokens": 4}, "min_tokens"),
    (C, {"use_beam_search": True}, "use_beam_search"),
    (C, {"stop_token_ids": [5]}, "stop_token_ids"),
    (C, {"guided_regex": "a+"}, "guided_regex"),
    (C, {"guided_choice": ["a", "b"]}, "guided_choice"),
    (CH, {"continue_final_message": True}, "continue_final_message"),
    (CH, {"add_generation_prompt": False}, "add_generation_prompt"),
    (CH, {"chat_template": "{{ messages }}"}, "chat_template"),
    (CH, {"echo": True}, "echo"),
    (CH, {"tool_choice": "auto"}, "tool_choice"),
    (CH, {"tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
    (CH, {"modalities": ["text", "audio"]}, "modalities"),
    (CH, {"prediction": {"type": "content", "content": "x"}}, "prediction"),
])
def test_unimplemented_field_is_refused(daemon, path, extra, param):
    body = dict({"prompt": "a"} if path == C else {"messages": MSG}, max_tokens=2, **extra)
    st, _, b = X.post_json(daemon.port, path, body)
    assert st == 400, b
    assert b["error"]["param"] == param and param in b["error"]["message"], b
    assert b["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("path,extra", [
    (C, {"ignore_eos": False, "use_beam_search": False, "min_tokens": 0, "typical_p": 1.0,
         "repeat_penalty": 1, "stop_token_ids": [], "include_stop_str_in_output": False,
         "n_probs": 0, "mirostat": 0}),
    (CH, {"continue_final_message": False, "add_generation_prompt": True, "echo": False,
          "tool_choice": "none", "modalities": ["text"], "parallel_tool_calls": True}),
    (C, {"user": "u1", "metadata": {"a": "b"}, "store": False, "service_tier": "auto",
         "cache_prompt": True, "some_unknown_field": 1}),
    (CH, {"user": "u1", "tools": [], "tool_choice": None, "model": "tiny"}),
])
def test_neutral_and_harmless_fields_pass(daemon, path, extra):
    body = dict({"prompt": "a"} if path == C else {"messages": MSG}, max_tokens=2, **extra)
    st, _, b = X.post_json(daemon.port, path, body)
    assert st == 200, b


@pytest.mark.parametrize("path", [C, CH])
def test_unknown_model_is_404(daemon, path):
    body = {"prompt": "a"} if path == C else {"messages": MSG}
    st, _, b = X.post_json(daemon.port, path, dict(body, model="gpt-4o", max_tokens=1))
    assert st == 404, b
    assert b["error"]["code"] == "model_not_found" and b["error"]["param"] == "model"
    assert "tiny" in b["error"]["message"]
    st, _, b = X.post_json(daemon.port, path, dict(body, model="tiny", max_tokens=1))
    assert st == 200, b
    st, _, b = X.post_json(daemon.port, path, dict(body, max_tokens=1))  # absent: fine
    assert st == 200, b


def test_model_name_option_is_what_requests_name(start_daemon, tiny_model):
    d = start_daemon(tiny_model, "--model-name", "xl-wt103")
    st, _, b = X.post_json(d.port, C, {"prompt": "a", "model": "xl-wt103", "max_tokens": 1})
    assert st == 200 and b["model"] == "xl-wt103"
    st, _, b = X.post_json(d.port, C, {"prompt": "a", "model": "tiny", "max_tokens": 1})
    assert st == 404 and b["error"]["code"] == "model_not_found"

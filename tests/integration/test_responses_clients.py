"""The Responses API through real npm clients (tests/clients/responses.mjs): the `openai` SDK's
client.responses.create / stream / retrieve / parse / inputItems / delete (and a function call
answered with a function_call_output), and the AI SDK's
default provider (`openai(model)` of @ai-sdk/openai, pointed at the daemon by OPENAI_BASE_URL)
with generateText, streamText and a tool loop. The packages are the pinned ones of tests/clients (npm ci once,
shared with test_npm_clients.py). Skips when node or npm is missing, unless XL_REQUIRE_NODE=1."""
import os
import subprocess

import pytest

import xlharness as X

CHECKS = ["openai_responses_create", "openai_responses_stream", "openai_responses_parse",
          "openai_responses_tools", "ai_sdk_generate_text", "ai_sdk_stream_text", "ai_sdk_tools"]


@pytest.fixture(scope="module")
def clients_dir(tmp_path_factory):
    return X.npm_clients(tmp_path_factory, "the Responses API client tests")


@pytest.mark.parametrize("check", CHECKS)
def test_responses_client(clients_dir, daemon, check):
    node, dest = clients_dir
    url = f"http://127.0.0.1:{daemon.port}/v1"
    env = dict(os.environ, XL_BASE_URL=url, XL_MODEL="tiny", OPENAI_BASE_URL=url,
               OPENAI_API_KEY="unused", AI_SDK_LOG_WARNINGS="false")
    r = subprocess.run([node, "responses.mjs", check], cwd=dest, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and f"ok {check}" in r.stdout, r.stdout[-3000:] + r.stderr[-5000:]

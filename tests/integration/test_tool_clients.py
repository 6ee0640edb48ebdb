"""Tool calls through real clients from npm (tests/clients/tools.mjs, packages pinned in
tests/clients/package.json + package-lock.json): the `openai` SDK's chat.completions with zod 4
tools (full, streamed and reassembled, the SDK's stream helper, a tool result fed back, a named
function, the 400 for an unknown one), LangChain's `bindTools` (tools run, ToolMessages sent
back) and `withStructuredOutput(schema, {method: "functionCalling"})`, and the AI SDK's
`generateText` / `streamText` with tools through @ai-sdk/openai-compatible (chat completions;
a tool with `execute` run by the SDK across two steps). Skips when node or npm is missing,
unless XL_REQUIRE_NODE=1 (CI), where that is a failure."""
import os
import subprocess

import pytest

import xlharness as X

CHECKS = ["openai_chat_tools", "langchain_bind_tools",
          "langchain_with_structured_output_function_calling", "ai_sdk_tools"]


@pytest.fixture(scope="module")
def clients_dir(tmp_path_factory):
    return X.npm_clients(tmp_path_factory, "the tool-call client tests")


@pytest.mark.parametrize("check", CHECKS)
def test_tool_client(clients_dir, daemon, check):
    node, dest = clients_dir
    env = dict(os.environ, XL_BASE_URL=f"http://127.0.0.1:{daemon.port}/v1", XL_MODEL="tiny")
    r = subprocess.run([node, "tools.mjs", check], cwd=dest, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and f"ok {check}" in r.stdout, r.stdout[-3000:] + r.stderr[-5000:]

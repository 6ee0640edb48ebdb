"""Real clients from npm against the daemon: the `openai` SDK (n > 1, streaming with n > 1, echo +
logprobs scoring against `xlserve eval --dump-nll`, response_format json_schema parsed by the
SDK's zod helper) and LangChain's `@langchain/openai`
(`generate` with several prompts in one request, `withStructuredOutput` in jsonSchema and
jsonMode). The packages are pinned in tests/clients/package.json + package-lock.json and
installed with `npm ci` into the build directory (once per lock file). Skips when node or npm
is missing, unless XL_REQUIRE_NODE=1 (CI), where that is a failure."""
import os
import subprocess

import pytest

import xlharness as X

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKS = ["openai_completions_n", "openai_completions_echo_logprobs", "openai_chat_stream_n",
          "openai_parse_json_schema",
          "langchain_generate_several_prompts", "langchain_with_structured_output_json_schema",
          "langchain_with_structured_output_json_mode"]

# ASCII (a token per character), over several prefill segments of the tiny model
ECHO_TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, "
             "it was the age of foolishness, it was the epoch of belief.") * 2


@pytest.fixture(scope="module")
def clients_dir(tmp_path_factory):
    return X.npm_clients(tmp_path_factory, "the real-client tests")


@pytest.mark.parametrize("check", CHECKS)
def test_npm_client(clients_dir, daemon, tiny_model, tmp_path, check):
    node, dest = clients_dir
    env = dict(os.environ, XL_BASE_URL=f"http://127.0.0.1:{daemon.port}/v1", XL_MODEL="tiny")
    if check == "openai_completions_echo_logprobs":  # the reference scores, from the CLI
        src, nll = tmp_path / "echo.txt", tmp_path / "echo.nll"
        src.write_text(ECHO_TEXT)
        r = subprocess.run([X.xlserve_bin(), "eval", "--model", tiny_model, "--text", str(src),
                            "--dump-nll", str(nll)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        env.update(XL_ECHO_TEXT=ECHO_TEXT, XL_ECHO_NLL=str(nll))
    r = subprocess.run([node, "clients.mjs", check], cwd=dest, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and f"ok {check}" in r.stdout, r.stdout[-3000:] + r.stderr[-5000:]

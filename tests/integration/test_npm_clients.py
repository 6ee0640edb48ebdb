"""Real clients from npm against the daemon: the `openai` SDK (n > 1, streaming with n > 1, echo +
logprobs scoring against `xlserve eval --dump-nll`, response_format json_schema parsed by the
SDK's zod helper) and LangChain's `@langchain/openai`
(`generate` with several prompts in one request, `withStructuredOutput` in jsonSchema and
jsonMode). The packages are pinned in tests/clients/package.json + package-lock.json and
installed with `npm ci` into the build directory (once per lock file). Skips when node or npm
is missing, unless XL_REQUIRE_NODE=1 (CI), where that is a failure."""
import hashlib
import os
import shutil
import subprocess

import pytest

import xlharness as X

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENTS = os.path.join(HERE, "..", "clients")
CHECKS = ["openai_completions_n", "openai_completions_echo_logprobs", "openai_chat_stream_n",
          "openai_parse_json_schema",
          "langchain_generate_several_prompts", "langchain_with_structured_output_json_schema",
          "langchain_with_structured_output_json_mode"]

# ASCII (a token per character), over several prefill segments of the tiny model
ECHO_TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, "
             "it was the age of foolishness, it was the epoch of belief.") * 2


def _need(tool):
    path = shutil.which(tool)
    if path:
        return path
    if os.environ.get("XL_REQUIRE_NODE") == "1":
        pytest.fail(f"{tool} is not installed and XL_REQUIRE_NODE=1")
    pytest.skip(f"{tool} is not installed (node 18 or later + npm run the real-client tests)")


@pytest.fixture(scope="module")
def clients_dir(tmp_path_factory):
    node, npm = _need("node"), _need("npm")
    build = os.environ.get("XL_BUILD_DIR") or str(tmp_path_factory.mktemp("npm"))
    dest = os.path.join(build, "npm-clients")
    os.makedirs(dest, exist_ok=True)
    lock = open(os.path.join(CLIENTS, "package-lock.json"), "rb").read()
    stamp = hashlib.sha256(lock).hexdigest()
    stamp_file = os.path.join(dest, ".installed")
    for f in ("package.json", "package-lock.json", "clients.mjs"):
        shutil.copyfile(os.path.join(CLIENTS, f), os.path.join(dest, f))
    if not (os.path.exists(stamp_file) and open(stamp_file).read() == stamp):
        r = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=dest, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, "npm ci failed:\n" + r.stdout[-3000:] + r.stderr[-3000:]
        open(stamp_file, "w").write(stamp)
    return node, dest


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

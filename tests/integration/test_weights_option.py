"""The daemon's weight type (option `weights`: flag, XLSERVE_WEIGHTS, config file): the ready
line names it, the same prompt scored over HTTP under f32, bf16 and int8 weights gives close but
not identical log-probs (the narrow matrices are in use), and an unknown type stops the daemon
at start naming the option."""
import os
import subprocess

import xlharness as X


def next_token_logprobs(port):
    """The 5 likeliest next tokens after a fixed prompt and their log-probs."""
    b = X.complete(port, prompt="It is a truth universally", max_tokens=1, temperature=0,
                   logprobs=5)
    return b["choices"][0]["logprobs"]["top_logprobs"][0]


def test_weight_types_over_http(start_daemon, tiny_model, tmp_path):
    conf = tmp_path / "int8.conf"
    conf.write_text("weights int8\n")
    runs = {}
    for w, args, env in (("f32", [], None), ("bf16", ["--weights", "bf16"], None),
                         ("int8", ["--config", str(conf)], None),
                         ("bf16-env", [], {"XLSERVE_WEIGHTS": "bf16"})):
        d = start_daemon(tiny_model, *args, env=env)
        ev = d.wait_log(lambda o: o.get("event") == "ready")
        assert f"; weights {w.split('-')[0]}; cpu " in ev["msg"], ev
        kernel = ev["msg"].split("; weight kernel ")[1].split("; weights ")[0]
        assert kernel in ("f32 GEMM", "f32 panels") if w == "f32" else kernel in (
            "widening", "dot-product (vdpbf16ps)" if w.startswith("bf16") else
            "dot-product (vpdpbusd)"), ev
        runs[w] = next_token_logprobs(d.port)
    assert runs["bf16"] == runs["bf16-env"]  # the same weights, however they were chosen
    for w in ("bf16", "int8"):
        shared = set(runs[w]) & set(runs["f32"])
        assert len(shared) >= 3, (w, runs)
        diffs = [abs(runs[w][t] - runs["f32"][t]) for t in shared]
        assert 0 < max(diffs) < 0.5, (w, runs)


def test_unknown_weight_type_is_refused(tiny_model):
    e = {k: v for k, v in os.environ.items() if not k.startswith("XLSERVE_") or k == "XLSERVE_BIN"}
    for args, env in ((["--weights", "int3"], {}), ([], {"XLSERVE_WEIGHTS": "fp16"})):
        r = subprocess.run([X.xlserve_bin(), "serve", "--model", tiny_model, *args],
                           capture_output=True, text=True, env={**e, **env}, timeout=20)
        assert r.returncode in (1, 2), r
        assert "option weights:" in r.stderr and "f32, bf16, int8" in r.stderr, r.stderr

"""Session memory dtypes (--kv-dtype f32|bf16|int8) through the daemon: the model record and
/metrics count the dtype's real bytes; a session exported by a daemon of one dtype imports into
a daemon of another and continues (into its own dtype, exactly as the original); a store written
under one dtype is read back under another after a restart (snapshot and turn deltas
converted); a bad dtype is refused at start. (A state naming an unknown dtype is refused by the
core: tests/unit/test_core_kvdtype.c.)"""
import json
import subprocess

import xlharness as X


def ok(port, sid, prompt, n):
    return X.complete(port, sid, prompt=prompt, max_tokens=n, temperature=0, logprobs=0)


def model_info(port):
    st, _, body = X.request(port, "GET", "/v1/models")
    assert st == 200
    return json.loads(body)["data"][0]["xlserve"]


def test_bytes_per_dtype_and_ram_accounting(start_daemon, tiny_model):
    d = {dt: start_daemon(tiny_model, "--kv-dtype", dt) for dt in ("f32", "bf16")}
    d["int8"] = start_daemon(tiny_model, env={"XLSERVE_KV_DTYPE": "int8"})  # the env variable
    info = {dt: model_info(x.port) for dt, x in d.items()}
    for dt in d:
        assert info[dt]["kv_dtype"] == dt
    per_tok = {dt: info[dt]["state_bytes_per_token"] for dt in d}
    assert per_tok["bf16"] * 2 == per_tok["f32"]
    # int8: a quarter of the elements plus an f32 scale per position, head and K/V
    n = info["f32"]
    assert per_tok["int8"] == per_tok["f32"] // 4 + n["n_layer"] * 2 * n["n_head"] * 4
    assert info["bf16"]["state_bytes"] < 0.51 * info["f32"]["state_bytes"]
    ram = {}
    for dt, x in d.items():
        ok(x.port, "s1", "Mr. Darcy walked", 5)
        ram[dt] = X.metric(x.port, "xlserve_session_ram_bytes")
        assert ram[dt] >= info[dt]["state_bytes"]
    # the same session (record and all) with a narrower memory: the difference is the state's
    assert ram["f32"] - ram["bf16"] == info["f32"]["state_bytes"] - info["bf16"]["state_bytes"]
    assert ram["f32"] - ram["int8"] == info["f32"]["state_bytes"] - info["int8"]["state_bytes"]


def test_export_import_across_dtypes(start_daemon, tiny_model):
    d = {dt: start_daemon(tiny_model, "--kv-dtype", dt) for dt in ("f32", "bf16", "int8")}
    for src in d:
        ok(d[src].port, "mv", "It is a truth universally acknowledged", 20)
        st, _, blob = X.request(d[src].port, "GET", "/v1/sessions/mv/state")
        assert st == 200 and blob[:8] == b"XLSESS\0\0"
        tokens = X.get_session(d[src].port, "mv")[1]["tokens"]
        for dst in d:
            sid = "from-%s" % src
            st, _, r = X.request(d[dst].port, "PUT", "/v1/sessions/%s/state" % sid, body=blob,
                                 headers={"Content-Type": "application/octet-stream"})
            assert st == 201, (src, dst, r)
            assert json.loads(r)["tokens"] == tokens
            b = ok(d[dst].port, sid, " that a single man", 10)
            assert len(b["choices"][0]["logprobs"]["tokens"]) == 10
        # the same dtype continues exactly as the original
        x = ok(d[src].port, "mv", " and", 12)
        st, _, r = X.request(d[src].port, "PUT", "/v1/sessions/copy/state", body=blob,
                             headers={"Content-Type": "application/octet-stream"})
        assert st == 201
        z = ok(d[src].port, "copy", " and", 12)
        assert X.lps(x) == X.lps(z)


def test_store_reopened_under_another_dtype(start_daemon, tiny_model, tmp_path):
    sd = str(tmp_path / "store")
    a = start_daemon(tiny_model, "--state-dir", sd, "--kv-dtype", "bf16")
    ok(a.port, "keep", "Elizabeth smiled", 8)
    ok(a.port, "keep", " and said", 8)  # a turn delta after the snapshot
    tokens = X.get_session(a.port, "keep")[1]["tokens"]
    assert a.stop() == 0
    for dt in ("int8", "f32"):
        b = start_daemon(tiny_model, "--state-dir", sd, "--kv-dtype", dt)
        st, s = X.get_session(b.port, "keep")[:2]
        assert st == 200 and s["tokens"] == tokens
        r = ok(b.port, "keep", " nothing", 6)
        assert len(r["choices"][0]["logprobs"]["tokens"]) == 6
        tokens = X.get_session(b.port, "keep")[1]["tokens"]
        assert b.stop() == 0


def test_bad_dtype_refused_at_start(tiny_model):
    p = subprocess.run([X.xlserve_bin(), "serve", "--model", tiny_model, "--kv-dtype", "fp8"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "option kv_dtype: 'fp8' is not one of f32, bf16, int8" in p.stderr

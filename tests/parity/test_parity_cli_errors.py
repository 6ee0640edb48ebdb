"""test_parity_cli_errors.py: corrupt inputs to `xlserve eval`, and the CPU path switch of every
command (unknown and foreign paths refused at start; `bench --cpu A,B` names each row's path),
and the arithmetic of `bench --weights`' rounds (medians and ranges of the printed rounds).

Owns: one test per broken input (model dir, safetensors file, config.json, ids file). Each
expects a non-zero exit below 128 (no signal, no abort), no sanitizer report, and exactly one
non-empty line on stderr that names the file / tensor / config key at fault.
"""
import json
import os
import re
import shutil
import struct
import subprocess

import numpy as np
import pytest

import make_random_model as gen
from parity_util import SEED, run_xlserve, xlserve_bin

BASE = "words_div1_proj_mixed"  # adaptive softmax, projections, tied copies, vocab.txt


@pytest.fixture
def model(tmp_path):
    d = str(tmp_path / "model")
    gen.write_model(BASE, d, seed=SEED)
    return d


@pytest.fixture
def ids_file(tmp_path):
    p = str(tmp_path / "ok.ids")
    with open(p, "w") as f:
        f.write(" ".join(str(i) for i in gen.token_stream(BASE)[:20]) + "\n")
    return p


def eval_args(model_dir, ids, out_dir):
    return ["eval", "--model", model_dir, "--ids", ids, "--tgt-len", 4,
            "--dump-nll", os.path.join(out_dir, "out.nll")]


def expect_error(args, names, problem_words=None):
    """names: strings that must all appear in the one message; problem_words: at least one of
    them (case-insensitive) must appear as well."""
    proc = run_xlserve(args, timeout=120)
    err = proc.stderr
    assert 0 < proc.returncode < 128, f"exit {proc.returncode}, stderr:\n{err}"
    for bad in ("Sanitizer", "runtime error:", "Segmentation", "Aborted", "core dumped"):
        assert bad not in err, f"crash/sanitizer report:\n{err}"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected exactly one message, got {len(lines)}:\n{err}"
    msg = lines[0]
    for name in names:
        assert name in msg, f"message does not name {name!r}: {msg}"
    if problem_words:
        assert any(w in msg.lower() for w in problem_words), \
            f"message does not say the problem ({problem_words}): {msg}"
    print(f"\n[error exit {proc.returncode}] {msg}")
    return msg


def st_path(model_dir):
    return os.path.join(model_dir, "model.safetensors")


def read_st(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def write_st(path, header, payload):
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + payload)


def rewrite_tensors(model_dir, edit):
    """Regenerates the model's tensors (F32), applies edit(dict) and rewrites the file with the
    regular writer (so offsets stay consistent and only the intended fault is present)."""
    tensors, _ = gen.stored_tensors(gen.CONFIGS[BASE], SEED)
    edit(tensors)
    gen.write_model(BASE, model_dir, seed=SEED, tensors=tensors)


# -- model directory / safetensors --------------------------------------------------------

def test_missing_model_dir(tmp_path, ids_file):
    missing = str(tmp_path / "no_such_model")
    expect_error(eval_args(missing, ids_file, str(tmp_path)), [missing])


def test_missing_safetensors(model, tmp_path, ids_file):
    os.remove(st_path(model))
    expect_error(eval_args(model, ids_file, str(tmp_path)), ["model.safetensors"])


TRUNCATION_WORDS = ["truncat", "short", "beyond", "exceed", "past", "end of", "size", "outside",
                    "out of", "too large", "too big", "larger", "bounds", "range"]


def test_truncated_data(model, tmp_path, ids_file):
    path = st_path(model)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - size // 3)
    expect_error(eval_args(model, ids_file, str(tmp_path)), ["model.safetensors"],
                 TRUNCATION_WORDS)


def test_truncated_in_header(model, tmp_path, ids_file):
    path = st_path(model)
    with open(path, "r+b") as f:
        f.truncate(40)
    expect_error(eval_args(model, ids_file, str(tmp_path)), ["model.safetensors"])


def test_shorter_than_length_prefix(model, tmp_path, ids_file):
    with open(st_path(model), "wb") as f:
        f.write(b"\x10\x00\x00")
    expect_error(eval_args(model, ids_file, str(tmp_path)), ["model.safetensors"])


def test_empty_safetensors(model, tmp_path, ids_file):
    open(st_path(model), "wb").close()
    expect_error(eval_args(model, ids_file, str(tmp_path)), ["model.safetensors"])


def test_corrupt_json_header(model, tmp_path, ids_file):
    path = st_path(model)
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        (n,) = struct.unpack("<Q", data[:8])
        data[8 + n // 2:8 + n // 2 + 6] = b"}{\x00\"]["
        f.seek(0)
        f.write(data)
    expect_error(eval_args(model, ids_file, str(tmp_path)), ["model.safetensors"])


def test_header_length_beyond_file(model, tmp_path, ids_file):
    path = st_path(model)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.write(struct.pack("<Q", size * 4))
    expect_error(eval_args(model, ids_file, str(tmp_path)), ["model.safetensors"])


def test_huge_header_length(model, tmp_path, ids_file):
    with open(st_path(model), "r+b") as f:
        f.write(struct.pack("<Q", 2 ** 63 + 5))
    expect_error(eval_args(model, ids_file, str(tmp_path)), ["model.safetensors"])


def test_offsets_beyond_file(model, tmp_path, ids_file):
    path = st_path(model)
    header, payload = read_st(path)
    name = "transformer.layers.1.pos_ff.CoreNet.0.weight"
    b, e = header[name]["data_offsets"]
    header[name]["data_offsets"] = [len(payload) + 64, len(payload) + 64 + (e - b)]
    write_st(path, header, payload)
    expect_error(eval_args(model, ids_file, str(tmp_path)), ["model.safetensors"])


def test_offsets_disagree_with_shape(model, tmp_path, ids_file):
    path = st_path(model)
    header, payload = read_st(path)
    name = "transformer.layers.0.dec_attn.o_net.weight"
    b, e = header[name]["data_offsets"]
    header[name]["data_offsets"] = [b, e - 4]
    write_st(path, header, payload)
    expect_error(eval_args(model, ids_file, str(tmp_path)), [name])


def test_wrong_shape(model, tmp_path, ids_file):
    name = "transformer.layers.1.dec_attn.qkv_net.weight"

    def edit(ts):
        a = ts[name]
        ts[name] = np.concatenate([a, a[:, :1]], axis=1)  # [3*H*D, d_model + 1]
    rewrite_tensors(model, edit)
    expect_error(eval_args(model, ids_file, str(tmp_path)), [name], ["shape", "dim", "size"])


def test_wrong_dtype(model, tmp_path, ids_file):
    name = "transformer.layers.0.pos_ff.layer_norm.weight"

    def edit(ts):
        ts[name] = np.round(ts[name] * 100).astype(np.int32)
    rewrite_tensors(model, edit)
    expect_error(eval_args(model, ids_file, str(tmp_path)), [name], ["dtype", "type", "i32"])


def test_missing_tensor(model, tmp_path, ids_file):
    name = "transformer.layers.1.pos_ff.CoreNet.3.bias"
    rewrite_tensors(model, lambda ts: ts.pop(name))
    expect_error(eval_args(model, ids_file, str(tmp_path)), [name], ["missing", "not found",
                                                                    "absent", "no tensor"])


def test_missing_cluster_tensor(model, tmp_path, ids_file):
    name = "crit.cluster_weight"
    rewrite_tensors(model, lambda ts: ts.pop(name))
    expect_error(eval_args(model, ids_file, str(tmp_path)), [name])


def test_untied_projection_missing(model, tmp_path, ids_file):
    # tie_projs is [False, True, False]: crit.out_projs.2 has no embedding side to fall back to.
    name = "crit.out_projs.2"
    rewrite_tensors(model, lambda ts: ts.pop(name))
    expect_error(eval_args(model, ids_file, str(tmp_path)), [name])


def test_tied_copy_with_wrong_shape(model, tmp_path, ids_file):
    """A stored copy of a tied tensor with a wrong shape: either rejected with a message naming
    it, or ignored (the embedding side is what a tied model uses) -- never read blindly."""
    name = "crit.out_layers.0.weight"

    def edit(ts):
        ts[name] = ts[name][:-1]
    rewrite_tensors(model, edit)
    proc = run_xlserve(eval_args(model, ids_file, str(tmp_path)), timeout=120)
    if proc.returncode == 0:
        assert "Sanitizer" not in proc.stderr
        return
    expect_error(eval_args(model, ids_file, str(tmp_path)), [name])


# -- config.json ----------------------------------------------------------------------------

def edit_config(model_dir, **updates):
    path = os.path.join(model_dir, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg.update(updates)
    with open(path, "w") as f:
        json.dump(cfg, f)


@pytest.mark.parametrize("key,value", [("n_head", 0), ("d_model", -32), ("n_layer", 0),
                                       ("vocab_size", -1), ("div_val", 0), ("mem_len", -5),
                                       ("layer_norm_epsilon", -1.0), ("d_head", "eight")])
def test_config_out_of_range(model, tmp_path, ids_file, key, value):
    edit_config(model, **{key: value})
    expect_error(eval_args(model, ids_file, str(tmp_path)), [key])


def test_config_cutoffs_not_increasing(model, tmp_path, ids_file):
    edit_config(model, cutoffs=[150, 60])
    expect_error(eval_args(model, ids_file, str(tmp_path)), ["cutoffs"])


def test_config_cutoff_beyond_vocab(model, tmp_path, ids_file):
    edit_config(model, cutoffs=[60, 400])
    expect_error(eval_args(model, ids_file, str(tmp_path)), ["cutoffs"])


def test_config_not_json(model, tmp_path, ids_file):
    with open(os.path.join(model, "config.json"), "w") as f:
        f.write('{"vocab_size": 300, "d_model": ')
    expect_error(eval_args(model, ids_file, str(tmp_path)), ["config.json"])


def test_config_missing(model, tmp_path, ids_file):
    os.remove(os.path.join(model, "config.json"))
    expect_error(eval_args(model, ids_file, str(tmp_path)), ["config.json"])


def test_config_attn_type_unsupported(model, tmp_path, ids_file):
    edit_config(model, attn_type=1)
    expect_error(eval_args(model, ids_file, str(tmp_path)), ["attn_type"])


def test_vocab_txt_missing(model, tmp_path, ids_file):
    os.remove(os.path.join(model, "vocab.txt"))
    expect_error(eval_args(model, ids_file, str(tmp_path)), ["vocab.txt"])


# -- the ids file ---------------------------------------------------------------------------

def test_ids_file_missing(model, tmp_path):
    missing = str(tmp_path / "no_such.ids")
    expect_error(eval_args(model, missing, str(tmp_path)), [missing])


def test_ids_file_is_a_directory(model, tmp_path):
    d = str(tmp_path / "a_dir.ids")
    os.mkdir(d)
    expect_error(eval_args(model, d, str(tmp_path)), [d])


@pytest.mark.parametrize("bad", ["300", "123456789012", "-1"])
def test_token_id_out_of_range(model, tmp_path, bad):
    p = str(tmp_path / "bad.ids")
    with open(p, "w") as f:
        f.write(f"5 17 42\n{bad} 8 9\n")
    expect_error(eval_args(model, p, str(tmp_path)), [os.path.basename(p)])


def test_token_id_not_a_number(model, tmp_path):
    p = str(tmp_path / "text.ids")
    with open(p, "w") as f:
        f.write("5 17 forty-two 8\n")
    expect_error(eval_args(model, p, str(tmp_path)), [os.path.basename(p)])


def test_valid_model_still_loads(model, tmp_path, ids_file):
    """Control: the untouched fixture model evaluates fine (so the failures above are the
    faults, not the fixture)."""
    proc = run_xlserve(eval_args(model, ids_file, str(tmp_path)), timeout=120)
    assert proc.returncode == 0, proc.stderr
    with open(os.path.join(str(tmp_path), "out.nll")) as f:
        assert len([ln for ln in f if ln.strip()]) == 19


def test_tied_copies_dropped_still_loads(model, tmp_path, ids_file):
    """Control: the same model with its tied copies dropped (stored once) loads and gives
    the same NLLs bit for bit."""
    ref_out = os.path.join(str(tmp_path), "out.nll")
    proc = run_xlserve(eval_args(model, ids_file, str(tmp_path)), timeout=120)
    assert proc.returncode == 0, proc.stderr
    with open(ref_out) as f:
        twice = f.read()
    d = str(tmp_path / "once")
    shutil.copytree(model, d)
    header, payload = read_st(st_path(d))
    for name in ("crit.out_layers.0.weight", "crit.out_projs.1"):
        header.pop(name)
    write_st(st_path(d), header, payload)
    proc = run_xlserve(eval_args(d, ids_file, str(tmp_path)), timeout=120)
    assert proc.returncode == 0, proc.stderr
    with open(ref_out) as f:
        assert f.read() == twice


# ---- the CPU path switch: a name the engine does not know, or a kernel family this CPU (or
# this build's architecture) cannot run, stops the command before any work, in one line.

def runnable_paths():
    """The paths `xlserve info` says this CPU runs (the binary's view: under an emulator the
    binary's architecture is not this Python's)."""
    env = {k: v for k, v in os.environ.items() if k != "XLSERVE_CPU"}
    out = subprocess.run([xlserve_bin(), "info", "--cpu", "portable"], capture_output=True,
                         text=True, timeout=120, env=env, check=True).stdout
    line = [ln for ln in out.splitlines() if ln.startswith("cpu path")][0]
    return line, line.split("this CPU runs:")[1].strip(" )").split(", ")


@pytest.fixture(scope="module")
def foreign():
    """A path of the other architecture: one this build can never run."""
    return "avx2" if "neon" in runnable_paths()[1] else "neon"


def test_cpu_path_unknown(model, ids_file, tmp_path):
    expect_error(eval_args(model, ids_file, str(tmp_path)) + ["--cpu", "sse9"],
                 ["--cpu sse9", "'sse9'", "avx2", "portable"], ["unknown"])


def test_cpu_path_this_cpu_cannot_run(model, ids_file, tmp_path, foreign):
    msg = expect_error(eval_args(model, ids_file, str(tmp_path)) + ["--cpu", foreign],
                       [f"--cpu {foreign}", "this CPU runs:", "portable"], ["not built", "lacks"])
    assert not os.path.exists(os.path.join(str(tmp_path), "out.nll"))
    assert msg.startswith("xlserve eval:")


def test_cpu_path_from_environment(model, ids_file, tmp_path, foreign):
    env = dict(os.environ, XLSERVE_CPU=foreign)
    for cmd in (eval_args(model, ids_file, str(tmp_path)), ["info", "--model", model],
                ["generate", "--model", model, "--prompt", "x", "-n", "1"],
                ["bench", "--model", model, "--quick"]):
        proc = subprocess.run([xlserve_bin()] + [str(a) for a in cmd], capture_output=True,
                              text=True, timeout=120, env=env)
        assert proc.returncode == 2, (cmd, proc.returncode, proc.stderr)
        assert f"XLSERVE_CPU={foreign}" in proc.stderr and "this CPU runs:" in proc.stderr, \
            proc.stderr


def test_cpu_path_named_by_info():
    """`xlserve info` names the path in use; --cpu portable always runs, and auto is the first
    of the paths this CPU runs."""
    env = {k: v for k, v in os.environ.items() if k != "XLSERVE_CPU"}
    line, runs = runnable_paths()
    assert line.split()[2] == "portable", line
    auto = subprocess.run([xlserve_bin(), "info"], capture_output=True, text=True, timeout=120,
                          env=env, check=True).stdout
    assert f"cpu path         {runs[0]} " in auto, (runs, auto)


def test_bench_compares_paths_in_one_run(model):
    """`xlserve bench --cpu A,B`: one block per path, each with its own limits (OpenBLAS's
    SGEMM and xlserve's GEMM, the faster marked as the compute limit; the read bandwidth); every
    row names its path; decode and segment rows give the limit they are set against (tokens/s)
    and the share of it reached. A bad name in the list fails before anything is measured."""
    paths = ["portable", runnable_paths()[1][0]]
    env = {k: v for k, v in os.environ.items() if k != "XLSERVE_CPU"}
    proc = subprocess.run([xlserve_bin(), "bench", "--model", model, "--quick", "--no-recurrence",
                           "--max-batch", "1", "--threads", "1", "--cpu", ",".join(paths)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.split()[:1] in ([p] for p in paths)]
    for p in paths:
        mine = [r for r in rows if r[0] == p]
        labels = [" ".join(r[1:4]) for r in mine]
        assert labels == ["F32 GEMM 1024^3,", "F32 GEMM 1024^3,", "read bandwidth: 1",
                          "decode, batch 1,", "segment evaluation (tgt_len"], proc.stdout
        assert [" ".join(r[-3:]) for r in mine[:2]].count("<- compute limit") == 1, proc.stdout
        assert mine[2][-4:-3] == ["GB/s"] and float(mine[2][-5]) > 0, proc.stdout
        for r in mine[3:]:  # tokens/s ... limit t/s, share of it
            rate, limit, share = float(r[-6 if r is mine[3] else -4]), float(r[-2]), r[-1]
            assert share.endswith("%") and limit > 0, proc.stdout
            assert abs(float(share[:-1]) - 100 * rate / limit) <= 0.51, (r, proc.stdout)
    bad = subprocess.run([xlserve_bin(), "bench", "--model", model, "--quick", "--cpu",
                          "portable,sse9"], capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode == 2 and "--cpu sse9" in bad.stderr and bad.stdout == "", bad


def test_bench_weights_table_is_the_median_of_its_rounds(model):
    """`xlserve bench --weights bf16,int8 --kv-dtype bf16,int8 --rounds 3`: every round is printed
    (each type's rate, and its ratio to f32's rate of the same round); the table gives per type
    the median of the rounds' rates and of their ratios, with the lowest and highest ratio.
    --rounds outside 1..64 is refused before anything is measured."""
    env = {k: v for k, v in os.environ.items() if k != "XLSERVE_CPU"}
    proc = subprocess.run([xlserve_bin(), "bench", "--model", model, "--quick", "--threads", "1",
                           "--max-batch", "16", "--weights", "bf16,int8", "--kv-dtype",
                           "bf16,int8", "--rounds", "3"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    kinds = ["decode b1", "decode b16", "segments"]
    types = ["f32+f32", "bf16+bf16", "int8+int8"]
    rounds = {}  # (kind, type) -> [(rate, ratio)] in round order
    for ln in lines:
        f = ln.split()
        if len(f) > 2 and f[1] == "round":
            kind = " ".join(f[3:5]) if f[3] == "decode" else f[3]
            body = ln.split("t/s:")[1].split()
            got = {}
            i = 0
            while i < len(body):
                name, r = body[i], float(body[i + 1])
                ratio = 1.0
                if i + 2 < len(body) and body[i + 2].startswith("("):
                    ratio = float(body[i + 2].strip("()x"))
                    i += 1
                got[name] = (r, ratio)
                i += 2
            assert sorted(got) == sorted(types), ln
            for t in types:
                rounds.setdefault((kind, t), []).append(got[t])
    assert sorted({k for k, _ in rounds}) == sorted(kinds), proc.stdout
    assert all(len(v) == 3 for v in rounds.values()), proc.stdout
    rows = [ln.split() for ln in lines if ln.split()[:1] and ln.split()[1:3] in
            (["f32", "f32"], ["bf16", "bf16"], ["int8", "int8"])]
    assert [r[1] for r in rows] == ["f32", "bf16", "int8"], proc.stdout
    for r in rows:
        t = f"{r[1]}+{r[2]}"
        for k, kind in enumerate(kinds):
            rate, ratio, low, high = r[4 + 4 * k: 8 + 4 * k]
            seen = rounds[(kind, t)]
            assert float(rate) == sorted(x for x, _ in seen)[1], (t, kind, proc.stdout)
            assert float(ratio.rstrip("x")) == sorted(x for _, x in seen)[1], (t, kind, proc.stdout)
            assert float(low.strip("[,")) == min(x for _, x in seen), (t, kind, proc.stdout)
            assert float(high.strip("]")) == max(x for _, x in seen), (t, kind, proc.stdout)
            if t == "f32+f32":
                assert (ratio, low, high) == ("1.00x", "[1.00,", "1.00]"), proc.stdout
    for bad in ("0", "65", "x"):
        p = subprocess.run([xlserve_bin(), "bench", "--model", model, "--quick", "--weights",
                            "int8", "--rounds", bad], capture_output=True, text=True, timeout=120,
                           env=env)
        assert p.returncode == 2 and "--rounds" in p.stderr and p.stdout == "", (bad, p)


def test_bench_thread_counts_table_is_the_median_of_its_rounds(model):
    """`xlserve bench --thread-counts 1,2 --weights int8 --kv-dtype int8 --rounds 3`: every round
    is printed (each count's decode rate, and its ratio to the first count's rate of the same
    round); the table gives per count the median of the rounds' rates and of their ratios, with
    the lowest and highest ratio, the read bandwidth of as many threads and the share of the
    step's limit at it. Bad counts and options that cannot go with it are refused before
    anything is measured."""
    env = {k: v for k, v in os.environ.items() if k != "XLSERVE_CPU"}
    proc = subprocess.run([xlserve_bin(), "bench", "--model", model, "--quick", "--thread-counts",
                           "1,2", "--weights", "int8", "--kv-dtype", "int8", "--max-batch", "1",
                           "--rounds", "3"], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "weights int8" in proc.stdout and "memory int8" in proc.stdout, proc.stdout
    # a step reads the weights, the positional table and one full memory (`xlserve info`)
    info = subprocess.run([xlserve_bin(), "info", "--model", model, "--weights", "int8",
                           "--kv-dtype", "int8"], capture_output=True, text=True, timeout=120,
                          env=env).stdout
    sizes = dict(re.findall(r"^(weights|state/session|position table) +(?:int8: )?(\d+) bytes",
                            info, re.M))
    assert len(sizes) == 3, info
    step_bytes = sum(int(v) for v in sizes.values())
    seen = {1: [], 2: []}  # count -> [(rate, ratio)] in round order
    for ln in proc.stdout.splitlines():
        f = ln.split()
        if len(f) > 2 and f[1] == "round" and "t/s:" in ln:
            body = ln.split("t/s:")[1].split()
            assert body[0:2] == ["1", "thr"] and body[3:5] == ["2", "thr"], ln
            r1, r2, ratio = float(body[2]), float(body[5]), float(body[6].strip("()x"))
            assert abs(ratio - r2 / r1) <= 0.0051, ln
            seen[1].append((r1, 1.0))
            seen[2].append((r2, ratio))
    assert all(len(v) == 3 for v in seen.values()), proc.stdout
    rows = [ln.split() for ln in proc.stdout.splitlines()
            if len(ln.split()) == 11 and ln.split()[2:4] == ["int8", "int8"]]
    assert [r[1] for r in rows] == ["1", "2"], proc.stdout
    for r in rows:
        n = int(r[1])
        rate, ratio, low, high, mb, gbs, share = r[4:11]
        assert float(rate) == sorted(x for x, _ in seen[n])[1], proc.stdout
        assert float(ratio.rstrip("x")) == sorted(x for _, x in seen[n])[1], proc.stdout
        assert float(low.strip("[,")) == min(x for _, x in seen[n]), proc.stdout
        assert float(high.strip("]")) == max(x for _, x in seen[n]), proc.stdout
        if n == 1:
            assert (ratio, low, high) == ("1.00x", "[1.00,", "1.00]"), proc.stdout
        mb, gbs, share = float(mb), float(gbs), float(share.rstrip("%"))
        assert mb > 0 and gbs > 0, r
        assert abs(mb - step_bytes / 1e6) <= 0.0005, (mb, step_bytes)
        # share = rate x step bytes / bandwidth, up to the printed digits of each
        slack = 0.51 + share * (0.0006 / mb + 0.006 / gbs + 0.006 / float(rate))
        assert abs(share - 100 * float(rate) * mb * 1e6 / (gbs * 1e9)) <= slack, r
    for bad in (["--thread-counts", "0"], ["--thread-counts", "9"], ["--thread-counts", "1,x"],
                ["--thread-counts", "1,2", "--clock", "thread"],
                ["--thread-counts", "1,2", "--weights", "bf16,int8"]):
        p = subprocess.run([xlserve_bin(), "bench", "--model", model, "--quick", *bad],
                           capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 2 and "--thread-counts" in p.stderr and p.stdout == "", (bad, p)


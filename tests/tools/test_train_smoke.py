"""Trainer smoke tests: train tiny models for a few steps, export them through the shared
writer, and check that the C engine reproduces the trainer's log-probs to 1e-4 (segment
evaluation and one-token decoding); resuming from a checkpoint continues bit for bit."""
import json
import os

import numpy as np
import torch

from conftest import engine_nll, report
from xltrain import train as xtrain
from xltrain.data import load_bytes
from xltrain.model import evaluate_stream, load_model_dir

TEXT = ("It is a truth universally acknowledged, that a single man in possession of a good "
        "fortune, must be in want of a wife. \u00a3 caf\u00e9 na\u00efve \u2014 end.\n")


def make_corpus(d):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(0)
    words = TEXT.split()
    for split, n in (("train", 3000), ("valid", 400), ("test", 400)):
        lines = [" ".join(rng.choice(words, size=12)) for _ in range(n // 60 + 1)]
        with open(os.path.join(d, split + ".txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return d


TINY = ["--n-layer", "2", "--d-model", "32", "--n-head", "4", "--d-head", "8",
        "--d-inner", "64", "--tgt-len", "12", "--mem-len", "20", "--batch", "4",
        "--log-interval", "4", "--eval-interval", "4", "--eval-bytes", "256",
        "--eval-streams", "2", "--threads", "1", "--warmup", "2", "--lr", "1e-2"]


def train(tmp_path, name, extra, steps=8):
    data = make_corpus(os.path.join(tmp_path, "data"))
    run = os.path.join(tmp_path, name)
    out = os.path.join(tmp_path, name + "-model")
    model = xtrain.main(["--data", data, "--run-dir", run, "--export", out,
                         "--max-steps", str(steps), *TINY, *extra])
    return data, out, model


def check_engine(engine, tmp_path, model_dir, data, tgt_lens, name):
    model = load_model_dir(model_dir)
    ids = load_bytes(os.path.join(data, "test.txt"))[:300]
    ref = evaluate_stream(model, ids, model.cfg.tgt_len).double().numpy()
    for tl in tgt_lens:
        got = engine_nll(engine, model_dir, ids.tolist(), tl, tmp_path)
        assert got.shape == ref.shape
        d = float(np.abs(got - ref).max())
        report(f"trainer vs engine ({name}, tgt_len {tl})", d)
        assert d < 1e-4, f"tgt_len {tl}: max diff {d}"
    return ref


def test_smoke_same_length(tmp_path, engine):
    data, out, model = train(tmp_path, "sl", [])
    cfg = json.load(open(os.path.join(out, "config.json")))
    assert cfg["xlserve_tokenizer"] == "bytes" and cfg["same_length"] is True
    assert cfg["vocab_size"] == 256 and cfg["tgt_len"] == 12 and cfg["mem_len"] == 20
    # the exported model is the trained one
    m2 = load_model_dir(out)
    for (k, a), b in zip(model.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(a, b), k
    ref = check_engine(engine, tmp_path, out, data, [12, 1, 7, 64], "same_length")
    assert ref.mean() < 5.0, f"training did not lower the loss (mean NLL {ref.mean():.3f})"
    # same_length: the trainer's own output does not depend on the segmenting either
    ids = load_bytes(os.path.join(data, "test.txt"))[:300]
    for tl in (1, 5, 40):
        d = float((evaluate_stream(m2, ids, tl).double().numpy() - ref).__abs__().max())
        assert d < 2e-5, f"trainer tgt_len {tl} vs 12: {d}"


def test_smoke_variants(tmp_path, engine):
    """pre-LN, causal mask without same_length, clamp_len, one r-bias pair for all layers."""
    data, out, _ = train(tmp_path, "var", ["--pre-lnorm", "--no-same-length", "--clamp-len",
                                           "9", "--tied-r"], steps=4)
    cfg = json.load(open(os.path.join(out, "config.json")))
    assert cfg["pre_lnorm"] and not cfg["same_length"] and cfg["clamp_len"] == 9
    assert not cfg["untie_r"]
    check_engine(engine, tmp_path, out, data, [12], "pre_lnorm/causal/clamp/tied r")


def test_resume_is_exact(tmp_path):
    data = make_corpus(os.path.join(tmp_path, "data"))
    common = ["--data", data, "--max-steps", "8", *TINY, "--seed", "3", "--dropout", "0.2"]
    a = xtrain.main(["--run-dir", os.path.join(tmp_path, "a"), *common])
    rb = os.path.join(tmp_path, "b")
    xtrain.main(["--run-dir", rb, *common, "--stop-after", "5"])
    b = xtrain.main(["--run-dir", rb, "--resume", "--data", data, "--threads", "1"])
    for (k, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), f"{k} differs after resume"
    log = open(os.path.join(rb, "train.log")).read()
    assert "resumed at step 5" in log


def test_smoke_adaptive(tmp_path, engine):
    """Optional adaptive embedding/softmax over the byte ids (two tail clusters, div_val 2,
    projections), trained and exported, against the engine."""
    data, out, _ = train(tmp_path, "ad", ["--cutoffs", "64,128", "--div-val", "2",
                                          "--d-embed", "48"], steps=4)
    cfg = json.load(open(os.path.join(out, "config.json")))
    assert cfg["cutoffs"] == [64, 128] and cfg["div_val"] == 2 and cfg["d_embed"] == 48
    check_engine(engine, tmp_path, out, data, [12, 5], "adaptive bytes")

#!/usr/bin/env python3
"""make_random_model.py: a random-weight Transformer-XL model directory of a named shape, in the
Hugging Face TransfoXL layout xlserve loads (config.json, model.safetensors in F32, and for
word-level models a vocab.txt of the right size). For measuring the daemon at a real model's
size without its weights: the outputs are meaningless, the costs (weights, state, store) are
the real model's.

Presets:
  wt103    the public WikiText-103 checkpoint's shape: 18 layers, d_model 1024, 16 heads of 64,
           d_inner 4096, adaptive softmax over 267,735 words with cutoffs 20000/40000/200000
           and div_val 4, mem_len 1600, tgt_len 128, clamp_len 1000 (about 1.1 GB of weights;
           225 MiB of state per full session)
  bundled  the shape of models/austen-byte (read from its config.json): bytes, 4 layers,
           d_model 256, mem_len 256 (2 MiB of state)

Usage: PYTHONPATH=tools python3 tools/make_random_model.py OUT_DIR --preset wt103|bundled
       [--seed S]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from xlmodel import model_dir  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WT103 = dict(
    vocab_size=267735, cutoffs=[20000, 40000, 200000], d_model=1024, d_embed=1024, n_head=16,
    d_head=64, d_inner=4096, div_val=4, pre_lnorm=False, n_layer=18, mem_len=1600, tgt_len=128,
    ext_len=0, clamp_len=1000, same_length=True, untie_r=True, tie_word_embeddings=True,
    tie_projs=[False, True, True, True], proj_share_all_but_first=True, adaptive=True,
    attn_type=0, layer_norm_epsilon=1e-5, xlserve_tokenizer="words")

# config keys of the bundled model that describe its shape (the rest: model_dir's defaults)
SHAPE_KEYS = ("vocab_size", "cutoffs", "d_model", "d_embed", "n_head", "d_head", "d_inner",
              "div_val", "pre_lnorm", "n_layer", "mem_len", "tgt_len", "clamp_len",
              "same_length", "untie_r", "tie_word_embeddings", "tie_projs",
              "proj_share_all_but_first", "adaptive", "attn_type", "layer_norm_epsilon",
              "xlserve_tokenizer")


def bundled_config():
    with open(os.path.join(ROOT, "models", "austen-byte", "config.json")) as f:
        cfg = json.load(f)
    return {k: cfg[k] for k in SHAPE_KEYS if k in cfg}


def tensors(cfg, seed):
    """{name: float32 array} of TransfoXLLMHeadModel for cfg; tied output tensors are left to
    the loader (stored once, on the embedding side). Scales keep activations of unit size."""
    rng = np.random.default_rng(seed)
    V, dm, de, dv = cfg["vocab_size"], cfg["d_model"], cfg["d_embed"], cfg.get("div_val", 1)
    H, D, di = cfg["n_head"], cfg["d_head"], cfg["d_inner"]
    cutoffs = list(cfg.get("cutoffs") or [])
    ends = [0] + cutoffs + [V]
    tie_projs = list(cfg.get("tie_projs") or [False] * (len(cutoffs) + 1))
    t = {}

    def normal(shape, std):
        a = rng.standard_normal(shape, dtype=np.float32)
        a *= np.float32(std)
        return a

    if dv == 1:
        t["transformer.word_emb.emb_layers.0.weight"] = normal((V, de), 1.0 / np.sqrt(dm))
        if de != dm:
            t["transformer.word_emb.emb_projs.0"] = normal((dm, de), 1.0 / np.sqrt(de * dm))
        dims, rows = [de] * (len(cutoffs) + 1), [V]
    else:
        dims = [de // dv ** i for i in range(len(cutoffs) + 1)]
        rows = [ends[i + 1] - ends[i] for i in range(len(cutoffs) + 1)]
        for i, (r, d) in enumerate(zip(rows, dims)):
            t["transformer.word_emb.emb_layers.%d.weight" % i] = normal((r, d), 1.0)
            t["transformer.word_emb.emb_projs.%d" % i] = normal((dm, d), 1.0 / np.sqrt(d * dm))
    for i, r in enumerate(rows):
        if not cfg.get("tie_word_embeddings", True):
            t["crit.out_layers.%d.weight" % i] = normal((r, dims[i]), 1.0 / np.sqrt(dims[i]))
        t["crit.out_layers.%d.bias" % i] = normal((r,), 0.5)
    if not (dv == 1 and de == dm):
        for i in range(len(cutoffs) + 1):
            if not (i < len(tie_projs) and tie_projs[i]):
                t["crit.out_projs.%d" % i] = normal((dm, dims[i]), 1.0 / np.sqrt(dims[i] * dm))
    if cutoffs:
        t["crit.cluster_weight"] = normal((len(cutoffs), de), 1.0)
        t["crit.cluster_bias"] = normal((len(cutoffs),), 0.5)
    if not cfg.get("untie_r", True):
        t["transformer.r_w_bias"] = normal((H, D), 0.1)
        t["transformer.r_r_bias"] = normal((H, D), 0.1)
    for n in range(cfg["n_layer"]):
        p = "transformer.layers.%d." % n
        t[p + "dec_attn.qkv_net.weight"] = normal((3 * H * D, dm), 1.0 / np.sqrt(dm))
        t[p + "dec_attn.o_net.weight"] = normal((dm, H * D), 1.0 / np.sqrt(H * D))
        t[p + "dec_attn.r_net.weight"] = normal((H * D, dm), 1.0 / np.sqrt(dm))
        t[p + "dec_attn.layer_norm.weight"] = 1 + normal((dm,), 0.1)
        t[p + "dec_attn.layer_norm.bias"] = normal((dm,), 0.1)
        t[p + "pos_ff.CoreNet.0.weight"] = normal((di, dm), 1.0 / np.sqrt(dm))
        t[p + "pos_ff.CoreNet.0.bias"] = normal((di,), 0.1)
        t[p + "pos_ff.CoreNet.3.weight"] = normal((dm, di), 1.0 / np.sqrt(di))
        t[p + "pos_ff.CoreNet.3.bias"] = normal((dm,), 0.1)
        t[p + "pos_ff.layer_norm.weight"] = 1 + normal((dm,), 0.1)
        t[p + "pos_ff.layer_norm.bias"] = normal((dm,), 0.1)
        if cfg.get("untie_r", True):
            t[p + "dec_attn.r_w_bias"] = normal((H, D), 0.1)
            t[p + "dec_attn.r_r_bias"] = normal((H, D), 0.1)
    return t


def word_vocab(n):
    return ["<eos>", "<unk>"] + ["w%d" % i for i in range(n - 2)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--preset", choices=("wt103", "bundled"), required=True)
    ap.add_argument("--seed", type=int, default=103)
    a = ap.parse_args()
    cfg = dict(WT103) if a.preset == "wt103" else bundled_config()
    vocab = word_vocab(cfg["vocab_size"]) if cfg.get("xlserve_tokenizer") == "words" else None
    t = tensors(cfg, a.seed)
    n = sum(x.size for x in t.values())
    model_dir.write_model_dir(a.out_dir, cfg, t, vocab=vocab,
                              metadata={"generator": "tools/make_random_model.py",
                                        "preset": a.preset, "seed": str(a.seed)})
    print("wrote %s (%s: %d layers, d_model %d, mem_len %d, vocab %d, %.1f M parameters)" % (
        a.out_dir, a.preset, cfg["n_layer"], cfg["d_model"], cfg["mem_len"], cfg["vocab_size"],
        n / 1e6))


if __name__ == "__main__":
    main()

"""make_random_model.py: random Transformer-XL models in the HF TransfoXL layout for the parity tests.

Owns: the catalogue of test configurations (CONFIGS: every option of the engine's forward
pass), the random weights (deterministic from a seed, scaled so that every parameter matters:
LayerNorm gains/biases away from 1/0, nonzero biases and r-biases, peaked but not one-hot
attention, log-probs spread over several nats), the storage variants (F32/F16/BF16, tied tensors
stored once or twice) and random token streams. Writes through tools/xlmodel.

Usage: make_random_model.py NAME OUT_DIR [--seed S]   (NAME from CONFIGS, or "list")
"""
import argparse
import os
import sys

import numpy as np

try:
    from xlmodel import model_dir
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "tools"))
    from xlmodel import model_dir

# Each entry: TransfoXLConfig keys (+ xlserve_tokenizer), plus generator-only keys:
#   _dtype: "F32" | "F16" | "BF16" storage of every float tensor
#   _tied_storage: "once" (tied tensors stored only on the embedding side) | "twice"
#   _stream: length of the test token stream
CONFIGS = {
    # Plain softmax over 256 bytes, post-LN, same_length without clamping, per-layer r-biases.
    "byte_plain_postln": dict(
        vocab_size=256, cutoffs=[], d_model=32, d_embed=32, n_head=4, d_head=8, d_inner=64,
        div_val=1, pre_lnorm=False, n_layer=2, mem_len=16, tgt_len=8, clamp_len=-1,
        same_length=True, untie_r=True, tie_word_embeddings=True, tie_projs=[False],
        layer_norm_epsilon=1e-5, xlserve_tokenizer="bytes",
        _dtype="F32", _tied_storage="once", _stream=84),
    # Plain softmax with d_embed != d_model (projection in and out, tied once/twice), pre-LN,
    # no same_length, shared r-biases, n_head*d_head != d_model, untied output weights,
    # a layer_norm_epsilon far from the default.
    "byte_plain_proj_preln": dict(
        vocab_size=256, cutoffs=[], d_model=32, d_embed=16, n_head=2, d_head=12, d_inner=48,
        div_val=1, pre_lnorm=True, n_layer=3, mem_len=12, tgt_len=6, clamp_len=-1,
        same_length=False, untie_r=False, tie_word_embeddings=False, tie_projs=[True],
        layer_norm_epsilon=2e-2, xlserve_tokenizer="bytes",
        _dtype="F32", _tied_storage="twice", _stream=70),
    # Adaptive softmax, div_val 1 with d_embed != d_model, mixed tied/untied projections,
    # two tail clusters, post-LN, same_length with clamp_len < mem_len.
    "words_div1_proj_mixed": dict(
        vocab_size=300, cutoffs=[60, 150], d_model=32, d_embed=24, n_head=4, d_head=8,
        d_inner=64, div_val=1, pre_lnorm=False, n_layer=2, mem_len=16, tgt_len=8, clamp_len=5,
        same_length=True, untie_r=True, tie_word_embeddings=True, tie_projs=[False, True, False],
        layer_norm_epsilon=1e-5, xlserve_tokenizer="words",
        _dtype="F32", _tied_storage="twice", _stream=90),
    # Adaptive softmax, div_val 2, three tail clusters (cluster order matters), mixed tied
    # projections incl. the head's, pre-LN, shared r-biases, same_length with clamp_len.
    "words_div2_3tails_preln": dict(
        vocab_size=400, cutoffs=[40, 120, 240], d_model=32, d_embed=32, n_head=4, d_head=8,
        d_inner=64, div_val=2, pre_lnorm=True, n_layer=3, mem_len=20, tgt_len=7, clamp_len=7,
        same_length=True, untie_r=False, tie_word_embeddings=True,
        tie_projs=[True, False, True, False], layer_norm_epsilon=1e-5, xlserve_tokenizer="words",
        _dtype="F32", _tied_storage="once", _stream=95),
    # Adaptive softmax, div_val 1 and d_embed == d_model: no projections anywhere; untied
    # output weights; post-LN; no same_length.
    "words_div1_noproj_untied": dict(
        vocab_size=300, cutoffs=[100], d_model=24, d_embed=24, n_head=3, d_head=8, d_inner=48,
        div_val=1, pre_lnorm=False, n_layer=2, mem_len=10, tgt_len=5, clamp_len=-1,
        same_length=False, untie_r=True, tie_word_embeddings=False, tie_projs=[False, True],
        layer_norm_epsilon=1e-5, xlserve_tokenizer="words",
        _dtype="F32", _tied_storage="once", _stream=64),
    # Adaptive softmax, div_val 3 with d_embed (48) != d_model (32): d_emb_i = 48, 16, 5;
    # everything untied; post-LN; no same_length; clamp_len without same_length.
    "words_div3_dembed_untied": dict(
        vocab_size=260, cutoffs=[80, 200], d_model=32, d_embed=48, n_head=4, d_head=6,
        d_inner=40, div_val=3, pre_lnorm=False, n_layer=2, mem_len=14, tgt_len=6, clamp_len=9,
        same_length=False, untie_r=True, tie_word_embeddings=False,
        tie_projs=[False, False, False], layer_norm_epsilon=1e-5, xlserve_tokenizer="words",
        _dtype="F32", _tied_storage="once", _stream=75),
    # Stored in F16: byte model, pre-LN, same_length with clamp_len, per-layer r-biases.
    "byte_f16_preln": dict(
        vocab_size=256, cutoffs=[], d_model=32, d_embed=32, n_head=4, d_head=8, d_inner=64,
        div_val=1, pre_lnorm=True, n_layer=2, mem_len=16, tgt_len=8, clamp_len=4,
        same_length=True, untie_r=True, tie_word_embeddings=True, tie_projs=[False],
        layer_norm_epsilon=1e-5, xlserve_tokenizer="bytes",
        _dtype="F16", _tied_storage="twice", _stream=84),
    # Stored in BF16: adaptive div_val 2 with d_embed != d_model, post-LN, same_length.
    "words_bf16_div2": dict(
        vocab_size=320, cutoffs=[64, 192], d_model=32, d_embed=40, n_head=4, d_head=8,
        d_inner=64, div_val=2, pre_lnorm=False, n_layer=2, mem_len=16, tgt_len=8, clamp_len=-1,
        same_length=True, untie_r=True, tie_word_embeddings=True, tie_projs=[False, True, True],
        layer_norm_epsilon=1e-5, xlserve_tokenizer="words",
        _dtype="BF16", _tied_storage="once", _stream=84),
}


def public_config(spec):
    return {k: v for k, v in spec.items() if not k.startswith("_")}


def tensor_specs(cfg):
    """[(name, shape, kind)] of every parameter of TransfoXLLMHeadModel for cfg, kind in
    emb | emb_proj | out_w | out_proj | out_b | cluster_w | cluster_b | qkv | o | r | rbias |
    ln_g | ln_b | ff1_w | ff1_b | ff2_w | ff2_b. Tied crit tensors are listed too (kind *_tied)
    with the name of the tensor they are tied to as a 4th element."""
    V, dm, de, dv = cfg["vocab_size"], cfg["d_model"], cfg["d_embed"], cfg["div_val"]
    H, D, n_layer = cfg["n_head"], cfg["d_head"], cfg["n_layer"]
    cutoffs = list(cfg["cutoffs"])
    ends = [0] + cutoffs + [V]
    nc = len(cutoffs)
    tie_projs = list(cfg.get("tie_projs") or [])
    specs = []
    if dv == 1:
        specs.append(("transformer.word_emb.emb_layers.0.weight", (V, de), "emb"))
        if de != dm:
            specs.append(("transformer.word_emb.emb_projs.0", (dm, de), "emb_proj"))
        out_dims = [de] * (nc + 1)
        out_rows = [V]
    else:
        out_dims = [de // dv ** i for i in range(nc + 1)]
        out_rows = [ends[i + 1] - ends[i] for i in range(nc + 1)]
        for i in range(nc + 1):
            specs.append((f"transformer.word_emb.emb_layers.{i}.weight",
                          (out_rows[i], out_dims[i]), "emb"))
            specs.append((f"transformer.word_emb.emb_projs.{i}", (dm, out_dims[i]), "emb_proj"))
    for i in range(len(out_rows)):
        wname = f"crit.out_layers.{i}.weight"
        if cfg["tie_word_embeddings"]:
            specs.append((wname, (out_rows[i], out_dims[i]), "out_w_tied",
                          f"transformer.word_emb.emb_layers.{i}.weight"))
        else:
            specs.append((wname, (out_rows[i], out_dims[i]), "out_w"))
        specs.append((f"crit.out_layers.{i}.bias", (out_rows[i],), "out_b"))
    for i in range(nc + 1):
        tie = bool(tie_projs[i]) if i < len(tie_projs) else False
        pname = f"crit.out_projs.{i}"
        if dv == 1 and de == dm:
            continue
        if tie:
            src = "transformer.word_emb.emb_projs." + ("0" if dv == 1 else str(i))
            specs.append((pname, (dm, out_dims[i]), "out_proj_tied", src))
        else:
            specs.append((pname, (dm, out_dims[i]), "out_proj"))
    if nc:
        specs.append(("crit.cluster_weight", (nc, de), "cluster_w"))
        specs.append(("crit.cluster_bias", (nc,), "cluster_b"))
    if not cfg["untie_r"]:
        specs.append(("transformer.r_w_bias", (H, D), "rbias"))
        specs.append(("transformer.r_r_bias", (H, D), "rbias"))
    for n in range(n_layer):
        p = f"transformer.layers.{n}."
        specs += [
            (p + "dec_attn.qkv_net.weight", (3 * H * D, dm), "qkv"),
            (p + "dec_attn.o_net.weight", (dm, H * D), "o"),
            (p + "dec_attn.r_net.weight", (H * D, dm), "r"),
            (p + "dec_attn.layer_norm.weight", (dm,), "ln_g"),
            (p + "dec_attn.layer_norm.bias", (dm,), "ln_b"),
            (p + "pos_ff.CoreNet.0.weight", (cfg["d_inner"], dm), "ff1_w"),
            (p + "pos_ff.CoreNet.0.bias", (cfg["d_inner"],), "ff1_b"),
            (p + "pos_ff.CoreNet.3.weight", (dm, cfg["d_inner"]), "ff2_w"),
            (p + "pos_ff.CoreNet.3.bias", (dm,), "ff2_b"),
            (p + "pos_ff.layer_norm.weight", (dm,), "ln_g"),
            (p + "pos_ff.layer_norm.bias", (dm,), "ln_b"),
        ]
        if cfg["untie_r"]:
            specs.append((p + "dec_attn.r_w_bias", (H, D), "rbias"))
            specs.append((p + "dec_attn.r_r_bias", (H, D), "rbias"))
    return specs


def random_tensors(cfg, seed):
    """{name: float32 array}, tied crit tensors included (equal to their embedding side).

    Scales: a token's scaled input embedding has entries of about unit size; q/k/r projections
    give attention scores with a spread of a couple of units (peaked, not one-hot); LayerNorm
    gains are 1 +- 0.3 and biases +- 0.3; r-biases are as large as the queries; output logits
    spread over a few nats."""
    rng = np.random.default_rng(seed)
    dm, H, D = cfg["d_model"], cfg["n_head"], cfg["d_head"]
    out = {}
    deferred = []
    for spec in tensor_specs(cfg):
        name, shape, kind = spec[:3]
        if kind.endswith("_tied"):
            deferred.append((name, spec[3]))
            continue
        fan_in = shape[-1] if len(shape) == 2 else 1
        if kind == "emb":
            # Without a projection the embedding row is the input itself (x sqrt(d_model)).
            has_proj = not (cfg["div_val"] == 1 and cfg["d_embed"] == dm)
            std = 1.0 if has_proj else 1.0 / np.sqrt(dm)
            a = rng.normal(0.0, std, shape)
        elif kind in ("emb_proj", "out_proj"):
            a = rng.normal(0.0, 1.0 / np.sqrt(fan_in * dm), shape)
        elif kind == "out_w":
            a = rng.normal(0.0, 2.0 / np.sqrt(fan_in), shape)
        elif kind in ("out_b", "cluster_b"):
            a = rng.normal(0.0, 0.5, shape)
        elif kind == "cluster_w":
            a = rng.normal(0.0, 1.0, shape)
        elif kind == "qkv":
            a = rng.normal(0.0, 1.3 / np.sqrt(fan_in), shape)
        elif kind == "r":
            a = rng.normal(0.0, 1.6 / np.sqrt(fan_in), shape)
        elif kind == "o":
            a = rng.normal(0.0, 1.0 / np.sqrt(fan_in), shape)
        elif kind == "rbias":
            a = rng.normal(0.0, 0.8, shape)
        elif kind == "ln_g":
            a = rng.uniform(0.6, 1.4, shape)
        elif kind == "ln_b":
            a = rng.normal(0.0, 0.3, shape)
        elif kind == "ff1_w":
            a = rng.normal(0.0, 1.4 / np.sqrt(fan_in), shape)
        elif kind == "ff2_w":
            a = rng.normal(0.0, 1.0 / np.sqrt(fan_in), shape)
        elif kind in ("ff1_b", "ff2_b"):
            a = rng.normal(0.0, 0.3, shape)
        else:
            raise AssertionError(kind)
        out[name] = a.astype(np.float32)
    for name, src in deferred:
        out[name] = out[src].copy()
    return out


def stored_tensors(spec, seed):
    """The tensors as they will be stored (tied ones dropped when stored once) and the
    dtype_override map for the writer. F16 storage casts here; BF16 via the writer."""
    cfg = public_config(spec)
    tensors = random_tensors(cfg, seed)
    if spec.get("_tied_storage", "once") == "once":
        for s in tensor_specs(cfg):
            if s[2].endswith("_tied"):
                del tensors[s[0]]
    dtype = spec.get("_dtype", "F32")
    override = None
    if dtype == "F16":
        tensors = {k: v.astype(np.float16) for k, v in tensors.items()}
    elif dtype == "BF16":
        override = {k: "BF16" for k in tensors}
    return tensors, override


def word_vocab(n):
    syms = ["<eos>", "<unk>"]
    syms += [f"w{i}" for i in range(n - len(syms))]
    return syms


def write_model(spec_or_name, out_dir, seed=1234, tensors=None, config_updates=None):
    """Writes the model directory; returns its config dict. tensors: replace the generated
    ones (for corrupt-input tests). config_updates: overwrite config keys after generation."""
    spec = CONFIGS[spec_or_name] if isinstance(spec_or_name, str) else spec_or_name
    cfg = public_config(spec)
    override = None
    if tensors is None:
        tensors, override = stored_tensors(spec, seed)
    if config_updates:
        cfg.update(config_updates)
    vocab = word_vocab(cfg["vocab_size"]) if cfg.get("xlserve_tokenizer") == "words" else None
    return model_dir.write_model_dir(out_dir, cfg, tensors, vocab=vocab,
                                     dtype_override=override,
                                     metadata={"generator": "tests/parity/make_random_model.py",
                                               "seed": seed})


def token_stream(spec_or_name, seed=99, n=None):
    """A deterministic random stream of token ids covering every softmax cluster."""
    spec = CONFIGS[spec_or_name] if isinstance(spec_or_name, str) else spec_or_name
    n = n or spec.get("_stream", 80)
    rng = np.random.default_rng(seed)
    V = spec["vocab_size"]
    ids = rng.integers(0, V, n)
    # Make sure every cluster appears among inputs and targets at least twice.
    ends = [0] + list(spec["cutoffs"]) + [V]
    for c in range(len(ends) - 1):
        for k in range(2):
            ids[(7 * c + 3 * k + 1) % n] = rng.integers(ends[c], ends[c + 1])
    return [int(x) for x in ids]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name")
    ap.add_argument("out_dir", nargs="?")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    if args.name == "list":
        print("\n".join(CONFIGS))
        return
    cfg = write_model(args.name, args.out_dir, seed=args.seed)
    print(f"wrote {args.out_dir} ({args.name}, vocab {cfg['vocab_size']})")


if __name__ == "__main__":
    main()

"""Conversions of the two source layouts to the xlserve model directory (HF TransfoXL layout).

Authors' layout (kimiyoung/transformer-xl pytorch/, MemTransformerLM):
  word_emb.*, layers.N.*, r_w_bias / r_r_bias at model level ([n_head, d_head], shared by all
  layers; a [n_layer, n_head, d_head] variant is split per layer), pos_emb.inv_freq (buffer),
  crit.* (ProjectedAdaptiveLogSoftmax). The authors' crit reads tail cluster i (1-based) from head
  column -i, i.e. cluster_weight row n_clusters - i, while HF reads row i - 1: the rows of
  crit.cluster_weight / crit.cluster_bias are reversed on conversion.
  Hyperparameters: from the pickled model's attributes when the file is a whole pickled
  MemTransformerLM, else inferred from tensor shapes; flags (as in the authors' run scripts:
  --same_length, --clamp_len, --mem_len, --tgt_len, --cutoffs, --div_val, --pre_lnorm) override.

Hugging Face layout: config.json + pytorch_model.bin or model.safetensors (+ vocab.pkl / vocab.bin).
"""
import json
import os
import sys

import numpy as np

from xlconvert import layout, torchfile, vocab_kinds
from xlmodel import model_dir, safetensors_io


class ConvertError(Exception):
    pass


def _arr(t):
    return t.numpy() if isinstance(t, torchfile.TensorRef) else np.asarray(t)


def _f32(a):
    a = np.asarray(a)
    return a.astype(np.float32) if a.dtype != np.float32 else a


# ------------------------------------------------------------------------------------------
# Vocabularies

def vocab_symbols(path, vocab_size=None):
    """idx2sym of a vocabulary file (see vocab_kinds.read_vocab)."""
    return read_vocab(path, vocab_size).symbols


def read_vocab(path, vocab_size=None, text_format="text"):
    try:
        return vocab_kinds.read_vocab(path, vocab_size, text_format)
    except vocab_kinds.VocabError as e:
        raise ConvertError(str(e)) from None


def choose_tokenizer(vocab, kind=None, options=None, where="vocabulary"):
    """(kind, options) for a VocabFile (None: no vocabulary) and the user's overrides."""
    try:
        return vocab_kinds.choose(vocab.symbols if vocab else None, vocab.meta if vocab else {},
                                  kind, options, where)
    except vocab_kinds.VocabError as e:
        raise ConvertError(str(e)) from None


# ------------------------------------------------------------------------------------------
# Writing

def finish(cfg, tensors, out_dir, where, vocab=None, tokenizer=None, metadata=None,
           tokenizer_options=None):
    """Fills tied tensors, validates names and shapes against the config, writes OUT_DIR.
    vocab: a VocabFile or None; tokenizer / tokenizer_options: the user's choice (None: the
    kind vocab_kinds derives from the vocabulary)."""
    tensors = dict(tensors)
    for dst, src in layout.tied_sources(cfg).items():
        if src not in tensors:
            continue
        if dst in tensors and not np.array_equal(tensors[dst], tensors[src]):
            print(f"{where}: note: {dst} differs from {src} although the config ties them; "
                  f"the tied value ({src}) is used, as the reference does", file=sys.stderr)
        tensors[dst] = tensors[src]
    tensors = {k: _f32(v) for k, v in tensors.items()}
    try:
        layout.validate(cfg, tensors, where)
    except ValueError as e:
        raise ConvertError(str(e)) from None
    if vocab is None and tokenizer != "bytes":
        raise ConvertError(f"{where}: a word-level model needs its vocabulary (--vocab FILE); "
                           "use --tokenizer bytes only for byte models with id = byte value")
    if tokenizer == "bytes" and cfg["vocab_size"] != 256:
        raise ConvertError(f"{where}: --tokenizer bytes needs vocab_size 256, the model has "
                           f"{cfg['vocab_size']}")
    if tokenizer == "bytes":
        vocab = None
    kind, options = choose_tokenizer(vocab, tokenizer, tokenizer_options,
                                     vocab.meta.get("path", where) if vocab else where)
    cfg = dict(cfg)
    cfg["xlserve_tokenizer"] = kind
    cfg.pop("xlserve_tokenizer_options", None)
    if options:
        cfg["xlserve_tokenizer_options"] = options
    return model_dir.write_model_dir(out_dir, cfg, tensors,
                                     vocab=vocab.symbols if vocab else None,
                                     metadata=dict(metadata or {}, producer="tools/convert.py"))


def _apply_overrides(cfg, ov):
    for k in ("mem_len", "tgt_len", "clamp_len", "same_length", "pre_lnorm",
              "layer_norm_epsilon"):
        if ov.get(k) is not None:
            cfg[k] = ov[k]
    return cfg


# ------------------------------------------------------------------------------------------
# Authors' checkpoints

def _pickled_hparams(model):
    """Hyperparameters stored as attributes of a whole pickled MemTransformerLM."""
    g = torchfile.opaque_attr
    hp = {}
    for k in ("n_token", "d_embed", "d_model", "n_head", "d_head", "n_layer", "tgt_len",
              "mem_len", "ext_len", "same_length", "clamp_len", "attn_type", "sample_softmax"):
        v = g(model, k)
        if v is not None:
            hp[k] = v
    crit = (g(model, "_modules") or {}).get("crit")
    if crit is not None:
        cutoffs = g(crit, "cutoffs")
        if isinstance(cutoffs, list) and cutoffs:
            hp["cutoffs"] = list(cutoffs[:-1])  # the crit stores cutoffs + [n_token]
        if g(crit, "div_val") is not None:
            hp["div_val"] = g(crit, "div_val")
    layers = (g(model, "_modules") or {}).get("layers")
    first = (g(layers, "_modules") or {}).get("0") if layers is not None else None
    if first is not None:
        attn = (g(first, "_modules") or {}).get("dec_attn")
        ff = (g(first, "_modules") or {}).get("pos_ff")
        if attn is not None and g(attn, "pre_lnorm") is not None:
            hp["pre_lnorm"] = bool(g(attn, "pre_lnorm"))
        ln = (g(attn, "_modules") or {}).get("layer_norm") if attn is not None else None
        if ln is not None and g(ln, "eps") is not None:
            hp["layer_norm_epsilon"] = float(g(ln, "eps"))
        if ff is not None and g(ff, "d_inner") is not None:
            hp["d_inner"] = g(ff, "d_inner")
    return hp


def _same_tensor(state, a, b):
    if a not in state or b not in state:
        return None
    ta, tb = state[a], state[b]
    if isinstance(ta, torchfile.TensorRef) and isinstance(tb, torchfile.TensorRef):
        if ta.identity() == tb.identity():
            return True
    va, vb = _arr(ta), _arr(tb)
    return va.shape == vb.shape and bool(np.array_equal(va, vb))


def convert_authors(ckpt, out_dir, overrides=None, vocab_path=None, tokenizer=None,
                    tokenizer_options=None):
    """An authors' checkpoint (state_dict or whole pickled MemTransformerLM) -> model dir."""
    ov = dict(overrides or {})
    try:
        loaded = torchfile.load(ckpt)
        state, module = torchfile.find_state_dict(loaded.obj, ckpt)
    except torchfile.TorchFileError as e:
        raise ConvertError(str(e)) from None
    if loaded.foreign_globals:
        print(f"{ckpt}: note: the file names globals outside torch/numpy/the model code (not "
              f"executed, replaced by inert stand-ins): {', '.join(loaded.foreign_globals)}",
              file=sys.stderr)
    state = {(k[7:] if k.startswith("module.") else k): v for k, v in state.items()}
    hp = _pickled_hparams(module) if module is not None else {}
    where = ckpt

    if hp.get("attn_type", 0) != 0 or "r_emb" in state or "r_bias" in state:
        raise ConvertError(f"{where}: attn_type {hp.get('attn_type', '1/2/3')} checkpoint; only "
                           "attn_type 0 (relative positional encoding with u/v biases) is supported")
    if hp.get("sample_softmax", -1) > 0 or "out_layer.weight" in state:
        raise ConvertError(f"{where}: sampled-softmax checkpoint (out_layer.*); only the "
                           "adaptive/plain softmax crit.* is supported")
    layer_ids = sorted({int(k.split(".")[1]) for k in state if k.startswith("layers.")})
    if not layer_ids:
        raise ConvertError(f"{where}: no layers.N.* tensors: not a MemTransformerLM checkpoint "
                           f"(names: {', '.join(list(state)[:8])} ...)")
    n_layer = len(layer_ids)
    if layer_ids != list(range(n_layer)):
        raise ConvertError(f"{where}: layer indices {layer_ids} are not 0..{n_layer - 1}")

    def need(name):
        if name not in state:
            raise ConvertError(f"{where}: missing tensor {name}")
        return state[name]

    qkv = need("layers.0.dec_attn.qkv_net.weight")
    d_model = qkv.shape[1]
    d_inner = need("layers.0.pos_ff.CoreNet.0.weight").shape[0]
    # r biases: shared [H, Dh] (authors), or [L, H, Dh], or per layer inside dec_attn.
    if "r_w_bias" in state:
        rw = state["r_w_bias"]
        if len(rw.shape) == 2:
            n_head, d_head = rw.shape
            untie_r = False
        elif len(rw.shape) == 3 and rw.shape[0] == n_layer:
            n_head, d_head = rw.shape[1:]
            untie_r = True
        else:
            raise ConvertError(f"{where}: r_w_bias has shape {tuple(rw.shape)}; expected "
                               f"[n_head, d_head] or [{n_layer}, n_head, d_head]")
    elif "layers.0.dec_attn.r_w_bias" in state:
        n_head, d_head = state["layers.0.dec_attn.r_w_bias"].shape
        untie_r = True
    else:
        raise ConvertError(f"{where}: no r_w_bias (neither model-level nor per layer)")

    emb_ids = sorted({int(k.split(".")[2]) for k in state if k.startswith("word_emb.emb_layers.")})
    if not emb_ids:
        raise ConvertError(f"{where}: missing tensor word_emb.emb_layers.0.weight")
    emb_rows = [need(f"word_emb.emb_layers.{i}.weight").shape for i in emb_ids]
    d_embed = emb_rows[0][1]
    vocab_size = sum(r for r, _ in emb_rows)
    n_clusters = state["crit.cluster_weight"].shape[0] if "crit.cluster_weight" in state else 0
    if len(emb_rows) > 1:
        div_val = d_embed // emb_rows[1][1]
        cutoffs = list(np.cumsum([r for r, _ in emb_rows])[:-1].tolist())
    else:
        div_val = 1
        cutoffs = hp.get("cutoffs") if hp.get("cutoffs") is not None else ov.get("cutoffs")
        if n_clusters and not cutoffs:
            raise ConvertError(f"{where}: the adaptive softmax has {n_clusters} tail clusters but "
                               "div_val is 1, so the cutoffs cannot be read from the tensor "
                               "shapes: give --cutoffs (as in the training script)")
        cutoffs = list(cutoffs or [])
    if ov.get("cutoffs") is not None and list(ov["cutoffs"]) != cutoffs:
        raise ConvertError(f"{where}: --cutoffs {ov['cutoffs']} contradicts the checkpoint "
                           f"({cutoffs})")
    if ov.get("div_val") is not None and ov["div_val"] != div_val:
        raise ConvertError(f"{where}: --div_val {ov['div_val']} contradicts the checkpoint "
                           f"({div_val})")
    if len(cutoffs) != n_clusters:
        raise ConvertError(f"{where}: {len(cutoffs)} cutoffs but crit.cluster_weight has "
                           f"{n_clusters} rows")

    cfg = {
        "vocab_size": int(vocab_size), "cutoffs": [int(c) for c in cutoffs],
        "d_model": int(d_model), "d_embed": int(d_embed), "n_head": int(n_head),
        "d_head": int(d_head), "d_inner": int(d_inner), "div_val": int(div_val),
        "pre_lnorm": bool(hp.get("pre_lnorm", False)), "n_layer": n_layer,
        "tgt_len": int(hp.get("tgt_len") or 128), "mem_len": int(hp.get("mem_len") or 0),
        "clamp_len": int(hp.get("clamp_len", -1)), "same_length": bool(hp.get("same_length", False)),
        "untie_r": untie_r, "attn_type": 0,
        "layer_norm_epsilon": float(hp.get("layer_norm_epsilon", 1e-5)),
        "adaptive": bool(cutoffs), "dropout": 0.0, "dropatt": 0.0,
    }
    _apply_overrides(cfg, ov)
    if module is None:
        for k, flag in (("mem_len", "--mem_len"), ("same_length", "--same_length / --no-same-length")):
            if ov.get(k) is None:
                print(f"{where}: note: a state_dict does not hold {k}; using {cfg[k]} (set it "
                      f"with {flag} as in the training script)", file=sys.stderr)
    if cfg["mem_len"] <= 0:
        raise ConvertError(f"{where}: mem_len must be > 0 (give --mem_len)")
    if hp.get("ext_len"):
        print(f"{where}: note: ext_len {hp['ext_len']} is ignored (xlserve uses ext_len 0)",
              file=sys.stderr)

    # Ties, as the source model has them (identical tensors or equal values).
    n_out = len(cutoffs) + 1
    tie_w = all(_same_tensor(state, f"crit.out_layers.{i}.weight",
                             f"word_emb.emb_layers.{i}.weight") is not False
                for i in range(n_out if div_val != 1 else 1))
    tie_projs = [False] * n_out
    for i in range(n_out):
        src = "word_emb.emb_projs.0" if div_val == 1 else f"word_emb.emb_projs.{i}"
        same = _same_tensor(state, f"crit.out_projs.{i}", src)
        tie_projs[i] = bool(same) if same is not None else (f"crit.out_projs.{i}" not in state
                                                            and src in state and i > 0)
    cfg["tie_word_embeddings"] = tie_w
    cfg["tie_projs"] = tie_projs
    cfg["proj_share_all_but_first"] = all(tie_projs[1:]) if n_out > 1 else True

    tensors = {}
    skipped = []
    for k, t in state.items():
        if k == "pos_emb.inv_freq":
            inv = _arr(t).astype(np.float64)
            want = 1.0 / (10000 ** (np.arange(0.0, d_model, 2.0) / d_model))
            if inv.shape != want.shape or not np.allclose(inv, want, rtol=1e-5):
                raise ConvertError(f"{where}: pos_emb.inv_freq is not the standard sinusoid")
            continue
        if k in ("r_w_bias", "r_r_bias"):
            a = _arr(t)
            if untie_r:
                for n in range(n_layer):
                    tensors[f"transformer.layers.{n}.dec_attn.{k}"] = a[n]
            else:
                tensors[f"transformer.{k}"] = a
            continue
        if k.startswith("word_emb.") or k.startswith("layers."):
            tensors["transformer." + k] = _arr(t)
        elif k in ("crit.cluster_weight", "crit.cluster_bias"):
            # authors: tail cluster i uses row n_clusters - i; HF: row i - 1 -> reverse rows.
            tensors[k] = _arr(t)[::-1].copy()
        elif k.startswith("crit."):
            tensors[k] = _arr(t)
        else:
            skipped.append(k)
    if skipped:
        raise ConvertError(f"{where}: cannot map tensors: {', '.join(skipped)}")
    vocab = read_vocab(vocab_path, vocab_size) if vocab_path and tokenizer != "bytes" else None
    if vocab is not None:
        vocab.meta["path"] = vocab_path
    if vocab is None and tokenizer is None:
        tokenizer = "bytes" if vocab_size == 256 else None
    return finish(cfg, tensors, out_dir, where, vocab=vocab, tokenizer=tokenizer,
                  tokenizer_options=tokenizer_options,
                  metadata={"source": "authors", "source_file": os.path.basename(ckpt)})


# ------------------------------------------------------------------------------------------
# Hugging Face checkpoints

def _hf_config(path):
    with open(path) as f:
        hf = json.load(f)
    if hf.get("model_type", "transfo-xl") not in ("transfo-xl", "transfo_xl"):
        raise ConvertError(f"{path}: model_type {hf.get('model_type')!r} is not transfo-xl")
    if "vocab_size" not in hf and "n_token" in hf:
        hf["vocab_size"] = hf["n_token"]
    if "tie_word_embeddings" not in hf and "tie_weight" in hf:
        hf["tie_word_embeddings"] = hf["tie_weight"]
    need = ["vocab_size", "d_model", "n_head", "d_head", "d_inner", "n_layer"]
    missing = [k for k in need if k not in hf]
    if missing:
        raise ConvertError(f"{path}: missing keys {', '.join(missing)}")
    if hf.get("attn_type", 0) != 0:
        raise ConvertError(f"{path}: attn_type {hf['attn_type']} is not supported (only 0)")
    if hf.get("sample_softmax", -1) > 0:
        print(f"{path}: note: sample_softmax is a training-time option; full softmax is used",
              file=sys.stderr)
    # HF builds the adaptive embedding/softmax from `cutoffs` whatever `adaptive` says.
    cut = list(hf.get("cutoffs", []))
    tie_projs = hf.get("tie_projs")
    if tie_projs is None:  # TransfoXLConfig derives it; proj_share_all_but_first defaults True
        tie_projs = [False] + [bool(hf.get("proj_share_all_but_first", True))] * len(cut)
    cfg = {
        "vocab_size": hf["vocab_size"], "cutoffs": cut, "d_model": hf["d_model"],
        "d_embed": hf.get("d_embed", hf["d_model"]), "n_head": hf["n_head"],
        "d_head": hf["d_head"], "d_inner": hf["d_inner"], "div_val": hf.get("div_val", 1),
        "pre_lnorm": bool(hf.get("pre_lnorm", False)), "n_layer": hf["n_layer"],
        "tgt_len": hf.get("tgt_len", 128), "mem_len": hf.get("mem_len", 0),
        "clamp_len": hf.get("clamp_len", -1), "same_length": bool(hf.get("same_length", False)),
        "untie_r": bool(hf.get("untie_r", True)), "attn_type": 0,
        "tie_word_embeddings": bool(hf.get("tie_word_embeddings", True)),
        "tie_projs": [bool(t) for t in tie_projs[:len(cut) + 1]],
        "proj_share_all_but_first": bool(hf.get("proj_share_all_but_first", True)),
        "layer_norm_epsilon": hf.get("layer_norm_epsilon", 1e-5), "adaptive": bool(cut),
        "dropout": 0.0, "dropatt": 0.0,
    }
    return cfg


def _hf_tokenizer_files(src_dir, meta):
    """tokenizer_config.json / special_tokens_map.json beside the vocabulary: HF passes them to
    TransfoXLTokenizer.__init__, whose values win over the pickled dict's."""
    if meta.get("format") != "hf_tokenizer":
        return
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        p = os.path.join(src_dir, name)
        if not os.path.exists(p):
            continue
        try:
            with open(p, encoding="utf-8") as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            raise ConvertError(f"{p}: not readable JSON ({e})") from None
        if isinstance(d, dict):
            meta.update({k: v for k, v in vocab_kinds.hf_tokenizer_meta(d).items()
                         if k != "format"})


def _xlserve_tokenizer(cfg_path):
    with open(cfg_path) as f:
        c = json.load(f)
    kind = c.get("xlserve_tokenizer")
    if kind not in vocab_kinds.KINDS or kind == "bytes":
        return None
    opts = c.get("xlserve_tokenizer_options") or {}
    return kind, (opts if isinstance(opts, dict) else {})


def convert_hf(src_dir, out_dir, overrides=None, vocab_path=None, tokenizer=None,
               tokenizer_options=None):
    ov = dict(overrides or {})
    cfg_path = os.path.join(src_dir, "config.json")
    if not os.path.exists(cfg_path):
        raise ConvertError(f"{cfg_path}: not found (a Hugging Face TransfoXL directory has "
                           "config.json)")
    cfg = _hf_config(cfg_path)
    st_path = os.path.join(src_dir, "model.safetensors")
    bin_path = os.path.join(src_dir, "pytorch_model.bin")
    if os.path.exists(st_path):
        where = st_path
        try:
            raw, _ = safetensors_io.read(st_path)
        except (ValueError, KeyError, OSError) as e:
            raise ConvertError(f"{st_path}: unreadable safetensors ({e})") from None
    elif os.path.exists(bin_path):
        where = bin_path
        try:
            loaded = torchfile.load(bin_path)
            state, _ = torchfile.find_state_dict(loaded.obj, bin_path)
        except torchfile.TorchFileError as e:
            raise ConvertError(str(e)) from None
        if loaded.foreign_globals:
            print(f"{bin_path}: note: inert stand-ins for {', '.join(loaded.foreign_globals)}",
                  file=sys.stderr)
        raw = {k: _arr(v) for k, v in state.items()}
    else:
        raise ConvertError(f"{src_dir}: neither model.safetensors nor pytorch_model.bin")
    tensors = {}
    unknown = []
    for k, v in raw.items():
        if k.endswith("pos_emb.inv_freq"):
            continue
        if k.startswith("transformer.") or k.startswith("crit."):
            tensors[k] = v
        elif k.startswith(("word_emb.", "layers.", "r_w_bias", "r_r_bias")):
            tensors["transformer." + k] = v  # a bare TransfoXLModel state dict
        else:
            unknown.append(k)
    if unknown:
        raise ConvertError(f"{where}: cannot map tensors: {', '.join(unknown[:10])}")
    if not any(k.startswith("crit.") for k in tensors) and not cfg["tie_word_embeddings"]:
        raise ConvertError(f"{where}: no crit.* tensors (a TransfoXLModel without the LM head?)")
    _apply_overrides(cfg, ov)
    if cfg["mem_len"] <= 0:
        raise ConvertError(f"{cfg_path}: mem_len must be > 0 (give --mem-len)")
    vocab = None
    found = vocab_path is None
    if vocab_path is None and tokenizer != "bytes":
        for name in ("vocab.pkl", "vocab.bin", "vocab.txt"):
            p = os.path.join(src_dir, name)
            if os.path.exists(p):
                vocab_path = p
                break
    if vocab_path is not None and tokenizer != "bytes":
        # a vocab.txt inside an HF directory is TransfoXLTokenizer's vocab_file
        vocab = read_vocab(vocab_path, cfg["vocab_size"],
                           text_format="hf_tokenizer" if found else "text")
        vocab.meta["path"] = vocab_path
        _hf_tokenizer_files(src_dir, vocab.meta)
    kept = _xlserve_tokenizer(cfg_path)
    if kept is not None and tokenizer is None and vocab is not None and found:
        # an xlserve model directory (converted before): its tokenizer stays as it was
        tokenizer, opts = kept
        tokenizer_options = dict(opts, **(tokenizer_options or {}))
    return finish(cfg, tensors, out_dir, where, vocab=vocab, tokenizer=tokenizer,
                  tokenizer_options=tokenizer_options,
                  metadata={"source": "huggingface", "source_dir": os.path.basename(
                      os.path.abspath(src_dir))})

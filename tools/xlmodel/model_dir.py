"""Writing an xlserve model directory: config.json (TransfoXLConfig keys), model.safetensors
(TransfoXLLMHeadModel tensor names) and, for word-level models, vocab.txt.

The tokenizer is named by the config key "xlserve_tokenizer": "bytes" (256 symbols, id = byte
value, no vocab.txt) or a kind that reads vocab.txt (one symbol per line in id order): "words"
(whitespace split, "<eos>" = newline, "<unk>"), "transfo_xl", "byte_table", "char_table"; their
settings are in "xlserve_tokenizer_options" (see tools/xlconvert/vocab_kinds.py).
"""
import json
import os

from . import safetensors_io

CONFIG_DEFAULTS = {
    "model_type": "transfo-xl",
    "architectures": ["TransfoXLLMHeadModel"],
    "cutoffs": [],
    "div_val": 1,
    "pre_lnorm": False,
    "clamp_len": -1,
    "same_length": True,
    "proj_share_all_but_first": True,
    "attn_type": 0,
    "untie_r": True,
    "tie_word_embeddings": True,
    "layer_norm_epsilon": 1e-5,
    "sample_softmax": -1,
    "adaptive": True,
    "dropout": 0.0,
    "dropatt": 0.0,
    "xlserve_tokenizer": "bytes",
}


def write_model_dir(out_dir, config, tensors, vocab=None, dtype_override=None, metadata=None):
    """config: dict with at least vocab_size, d_model, d_embed, n_head, d_head, d_inner,
    n_layer, mem_len. tensors: {hf_name: np.ndarray}. vocab: list of symbols (word models)."""
    os.makedirs(out_dir, exist_ok=True)
    cfg = dict(CONFIG_DEFAULTS)
    cfg.update(config)
    if "tie_projs" not in cfg:
        share = bool(cfg["proj_share_all_but_first"])
        cfg["tie_projs"] = [False] + [share] * len(cfg["cutoffs"])
    if vocab is not None:
        if config.get("xlserve_tokenizer") in (None, "bytes"):
            cfg["xlserve_tokenizer"] = "words"
        if len(vocab) != cfg["vocab_size"]:
            raise ValueError(f"vocab has {len(vocab)} symbols, config says {cfg['vocab_size']}")
        with open(os.path.join(out_dir, "vocab.txt"), "w", encoding="utf-8") as f:
            for sym in vocab:
                f.write(sym + "\n")
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    safetensors_io.write(os.path.join(out_dir, "model.safetensors"), tensors,
                         metadata=dict(metadata or {}, format="pt"),
                         dtype_override=dtype_override)
    return cfg

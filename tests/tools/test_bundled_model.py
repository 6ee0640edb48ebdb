"""The bundled default model (models/austen-byte): it loads in PyTorch and in the C engine,
both give the same log-probs on a short Austen-like text (1e-4), and it has learned English."""
import json
import os

import numpy as np
import torch

from conftest import SOURCE_DIR, engine_nll, report
from xltrain.model import evaluate_stream, load_model_dir

MODEL = os.path.join(SOURCE_DIR, "models", "austen-byte")
TEXT = ("Mr. Darcy had walked away to another part of the room, and Elizabeth was left to "
        "reflect on what had passed. She could not help observing, as she turned over some "
        "music-books that lay on the instrument, how frequently his eyes were fixed on her. "
        "\"I hope,\" said Miss Bingley, \"you will give your sister the pleasure of knowing "
        "how very much she is esteemed by all the family.\"\n")


def test_bundled_model(tmp_path, engine):
    cfg = json.load(open(os.path.join(MODEL, "config.json")))
    assert cfg["xlserve_tokenizer"] == "bytes" and cfg["same_length"] is True
    size = os.path.getsize(os.path.join(MODEL, "model.safetensors"))
    assert size <= 25 * 1024 * 1024
    model = load_model_dir(MODEL)
    ids = torch.tensor(list(TEXT.encode("utf-8")), dtype=torch.long)
    ref = evaluate_stream(model, ids, cfg["tgt_len"]).double().numpy()
    bpc = ref.mean() / np.log(2)
    # 400 bytes from an empty memory (uniform would be 8 bits): about 2.55
    assert bpc < 3.0, f"the bundled model scores {bpc:.3f} bits/byte on plain Austen prose"
    for tl in (cfg["tgt_len"], 37):
        got = engine_nll(engine, MODEL, ids.tolist(), tl, tmp_path)
        d = float(np.abs(got - ref).max())
        report(f"bundled model, trainer vs engine (tgt_len {tl})", d)
        assert d < 1e-4

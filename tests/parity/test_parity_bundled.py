"""test_parity_bundled.py: the bundled model (models/austen-byte) in the C engine against the
numpy reference, on real text rather than a random model.

Owns: segment evaluation with memory of 321 bytes of Austen (the opening of Pride and
Prejudice, public domain: the model's own domain), cut into 10 segments of 32 with a memory of
64 so that the memory fills and is truncated (8 segments run with a full memory), max |engine -
reference| <= 1e-4 on natural-log NLL. Short on purpose: it also runs under qemu-user in the arm64 cross
build (tools/test-arm64.sh), where the engine is ~300x slower.
"""
import math
import os

import numpy as np

from parity_util import TOL, engine_nll, record, reference_nll

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models",
                     "austen-byte")
TGT_LEN, MEM_LEN, N_BYTES = 32, 64, 321
TEXT = ("It is a truth universally acknowledged, that a single man in possession of a good "
        "fortune, must be in want of a wife.\n\nHowever little known the feelings or views of "
        "such a man may be on his first entering a neighbourhood, this truth is so well fixed "
        "in the minds of the surrounding families, that he is considered the rightful property "
        "of some one or other of their daughters.\n\n\"My dear Mr. Bennet,\" said his lady to "
        "him one day, \"have you heard that Netherfield Park is let at last?\"\n")


def test_bundled_model_segments_with_memory(tmp_path):
    ids = list(TEXT.encode()[:N_BYTES])  # byte tokenizer: token id = byte value
    assert len(ids) == N_BYTES
    n_pred = len(ids) - 1
    assert n_pred >= MEM_LEN + 5 * TGT_LEN  # segments that run with a full, truncated memory
    eng = engine_nll(MODEL, ids, TGT_LEN, str(tmp_path), mem_len=MEM_LEN, tag="bundled")
    ref = reference_nll(MODEL, ids, TGT_LEN, mem_len=MEM_LEN)
    diff = np.abs(eng - ref)
    record("bundled austen-byte", f"segments tgt_len={TGT_LEN} mem_len={MEM_LEN}", n_pred,
           math.ceil(n_pred / TGT_LEN), diff.max())
    assert np.isfinite(eng).all(), "non-finite NLL from the engine"
    # the trained model on its own domain: far below the 8 bits of a uniform byte
    assert eng.mean() / math.log(2) < 3.0, f"bits/byte {eng.mean() / math.log(2):.3f}"
    worst = int(diff.argmax())
    assert diff.max() <= TOL, (f"max |engine - reference| = {diff.max():.3e} at prediction "
                               f"{worst} (engine {eng[worst]:.6f}, reference {ref[worst]:.6f})")

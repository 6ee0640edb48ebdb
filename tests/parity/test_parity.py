"""test_parity.py: the C engine (`xlserve eval --dump-nll`) against the numpy reference.

Owns: for every configuration of make_random_model.CONFIGS,
  - segment evaluation with memory at the config's own defaults (tgt_len, mem_len, clamp_len,
    same_length read from config.json by the engine) over >= 5 segments with a truncated memory;
  - one-token decoding (`--tgt-len 1`, the engine's cached path) against the reference fed one
    token at a time;
  - same_length models: chunked evaluation at several tgt_len (incl. one longer than mem_len)
    against the engine's own one-at-a-time run and the reference;
  - models without same_length: another segmenting, compared like with like;
  - run-time overrides (--mem-len, --clamp-len, --same-length / --no-same-length).
Every comparison is max |engine - reference| <= 1e-4 on natural-log NLL; each is recorded for
the summary table (conftest.py).
"""
import math

import numpy as np
import pytest

import make_random_model as gen
from parity_util import TOL, engine_nll, record, reference_nll

NAMES = list(gen.CONFIGS)
SAME_LENGTH = [n for n in NAMES if gen.CONFIGS[n]["same_length"]]
NOT_SAME_LENGTH = [n for n in NAMES if not gen.CONFIGS[n]["same_length"]]


def _flags(spec):
    return dict(mem_len=spec["mem_len"], clamp_len=spec["clamp_len"],
                same_length=spec["same_length"])


def _compare(name, check, eng, ref, tgt_len):
    assert eng.shape == ref.shape
    diff = np.abs(eng - ref)
    worst = int(diff.argmax())
    record(name, check, len(ref), math.ceil(len(ref) / tgt_len), diff.max())
    assert np.isfinite(eng).all(), f"{name} {check}: non-finite NLL from the engine"
    assert diff.max() <= TOL, (f"{name} {check}: max |engine - reference| = {diff.max():.3e} at "
                               f"prediction {worst} (engine {eng[worst]:.6f}, reference "
                               f"{ref[worst]:.6f}); first 8 diffs {diff[:8]}")


@pytest.mark.parametrize("name", NAMES)
def test_segments_with_memory(models, tmp_path, name):
    spec = gen.CONFIGS[name]
    ids = gen.token_stream(name)
    L, M = spec["tgt_len"], spec["mem_len"]
    n_pred = len(ids) - 1
    # The test design itself: >= 5 segments that run with a full, truncated memory.
    assert n_pred > M + 5 * L, (name, n_pred, M, L)
    eng = engine_nll(models[name], ids, L, str(tmp_path), tag="seg")  # defaults from config
    ref = reference_nll(models[name], ids, L)
    _compare(name, f"segments tgt_len={L} mem_len={M}", eng, ref, L)


@pytest.mark.parametrize("name", NAMES)
def test_one_token_decode(models, tmp_path, name):
    spec = gen.CONFIGS[name]
    ids = gen.token_stream(name)
    eng = engine_nll(models[name], ids, 1, str(tmp_path), tag="one", **_flags(spec))
    ref = reference_nll(models[name], ids, 1)
    _compare(name, "one token at a time (tgt_len=1)", eng, ref, 1)


@pytest.mark.parametrize("name", SAME_LENGTH)
def test_same_length_chunking(models, tmp_path, name):
    spec = gen.CONFIGS[name]
    ids = gen.token_stream(name)
    M = spec["mem_len"]
    one = engine_nll(models[name], ids, 1, str(tmp_path), tag="c1", **_flags(spec))
    ref = reference_nll(models[name], ids, 1)
    for L in (3, spec["tgt_len"] + 3, 2 * M + 3):
        eng = engine_nll(models[name], ids, L, str(tmp_path), tag=f"c{L}", **_flags(spec))
        _compare(name, f"chunked tgt_len={L} vs engine 1-by-1", eng, one, L)
        _compare(name, f"chunked tgt_len={L} vs reference", eng, ref, L)


@pytest.mark.parametrize("name", NOT_SAME_LENGTH)
def test_other_segmenting_without_same_length(models, tmp_path, name):
    spec = gen.CONFIGS[name]
    ids = gen.token_stream(name)
    L = spec["tgt_len"] + 3
    eng = engine_nll(models[name], ids, L, str(tmp_path), tag="alt", **_flags(spec))
    ref = reference_nll(models[name], ids, L)
    _compare(name, f"segments tgt_len={L} (like with like)", eng, ref, L)


OVERRIDES = [
    # (config, tgt_len, mem_len, clamp_len, same_length)
    ("byte_plain_postln", 4, 10, 3, False),        # turn same_length off, add clamping
    ("words_div3_dembed_untied", 5, 12, 0, True),   # turn same_length on, clamping off
    ("words_div2_3tails_preln", 6, 13, 11, True),   # other mem_len and clamp_len
]


@pytest.mark.parametrize("name,L,M,C,S", OVERRIDES)
def test_runtime_overrides(models, tmp_path, name, L, M, C, S):
    ids = gen.token_stream(name)
    eng = engine_nll(models[name], ids, L, str(tmp_path), tag="ovr", mem_len=M, clamp_len=C,
                     same_length=S)
    ref = reference_nll(models[name], ids, L, mem_len=M, clamp_len=C, same_length=S)
    # Each override must matter here, or the test could not tell it was ignored.
    spec = gen.CONFIGS[name]
    for key, alt in (("mem_len", dict(mem_len=spec["mem_len"], clamp_len=C, same_length=S)),
                     ("clamp_len", dict(mem_len=M, clamp_len=spec["clamp_len"], same_length=S)),
                     ("same_length", dict(mem_len=M, clamp_len=C,
                                          same_length=spec["same_length"]))):
        if alt[key] != dict(mem_len=M, clamp_len=C, same_length=S)[key]:
            other = reference_nll(models[name], ids, L, **alt)
            assert np.abs(other - ref).max() > 1e-2, f"override of {key} does not matter here"
    _compare(name, f"override L={L} M={M} C={C} S={int(S)}", eng, ref, L)

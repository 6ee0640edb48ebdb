"""parity_util.py: helpers shared by the parity tests.

Owns: running `xlserve eval --dump-nll` (binary from $XLSERVE_BIN), the cached reference
evaluations, and the list of measured max differences that conftest.py prints as a table.
"""
import functools
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))

import xl_reference  # noqa: E402

TOL = 1e-4
SEED = 1234
RESULTS = []  # (config, check, n_predicted, n_segments, max_diff, tol)


def record(config, check, n_pred, n_seg, max_diff, tol=TOL):
    RESULTS.append((config, check, n_pred, n_seg, float(max_diff), tol))
    print(f"\n[parity] {config:26s} {check:38s} n={n_pred:4d} segs={n_seg:3d} "
          f"max|diff|={max_diff:.3e}")


def xlserve_bin():
    path = os.environ.get("XLSERVE_BIN")
    if not path:
        pytest.skip("XLSERVE_BIN is not set (run through ctest, or export it)")
    if not os.access(path, os.X_OK):
        pytest.fail(f"XLSERVE_BIN={path} is not an executable file")
    return path


def run_xlserve(args, timeout=300):
    """Runs the engine's CLI; returns the CompletedProcess (text mode)."""
    return subprocess.run([xlserve_bin()] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=timeout)


def engine_nll(model_dir, ids, tgt_len, tmp_dir, mem_len=None, clamp_len=None,
               same_length=None, tag="run"):
    """`xlserve eval --ids ... --dump-nll OUT`; returns the NLLs as float64 array."""
    ids_path = os.path.join(tmp_dir, f"{tag}.ids")
    out_path = os.path.join(tmp_dir, f"{tag}.nll")
    with open(ids_path, "w") as f:
        f.write(" ".join(str(i) for i in ids) + "\n")
    args = ["eval", "--model", model_dir, "--ids", ids_path, "--tgt-len", tgt_len]
    if mem_len is not None:
        args += ["--mem-len", mem_len]
    if clamp_len is not None:
        args += ["--clamp-len", clamp_len]
    if same_length is not None:
        args.append("--same-length" if same_length else "--no-same-length")
    args += ["--dump-nll", out_path]
    proc = run_xlserve(args)
    assert proc.returncode == 0, (f"xlserve {' '.join(map(str, args))} failed with "
                                  f"{proc.returncode}:\n{proc.stderr}")
    with open(out_path) as f:
        vals = [float(line) for line in f if line.strip()]
    assert len(vals) == len(ids) - 1, f"--dump-nll wrote {len(vals)} lines for {len(ids)} ids"
    return np.asarray(vals, dtype=np.float64)


@functools.lru_cache(maxsize=None)
def _reference(model_dir, mem_len, clamp_len, same_length):
    return xl_reference.Reference.from_dir(model_dir, mem_len=mem_len, clamp_len=clamp_len,
                                           same_length=same_length)


@functools.lru_cache(maxsize=None)
def _reference_nll(model_dir, ids, tgt_len, mem_len, clamp_len, same_length):
    ref = _reference(model_dir, mem_len, clamp_len, same_length)
    return ref.eval_nll(list(ids), tgt_len)


def reference_nll(model_dir, ids, tgt_len, mem_len=None, clamp_len=None, same_length=None):
    return _reference_nll(model_dir, tuple(ids), tgt_len, mem_len, clamp_len, same_length)


def reference(model_dir, mem_len=None, clamp_len=None, same_length=None):
    return _reference(model_dir, mem_len, clamp_len, same_length)

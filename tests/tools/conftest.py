"""Shared helpers of the tools tests (trainer, converter, corpus): paths, the engine binary,
and running `xlserve eval --dump-nll` to compare log-probs with PyTorch."""
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("XL_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
TOOLS = os.path.join(SOURCE_DIR, "tools")
for p in (TOOLS, os.path.join(HERE, "authors_ref")):
    if p not in sys.path:
        sys.path.insert(0, p)

import torch  # noqa: E402

torch.set_num_threads(1)


def xlserve_bin():
    b = os.environ.get("XLSERVE_BIN")
    if b and os.path.exists(b):
        return b
    for cand in ("build/xlserve", "build-tools/xlserve"):
        p = os.path.join(SOURCE_DIR, cand)
        if os.path.exists(p):
            return p
    return None


@pytest.fixture(scope="session")
def engine():
    b = xlserve_bin()
    if b is None:
        pytest.skip("xlserve binary not built (set XLSERVE_BIN)")
    return b


def engine_nll(binary, model_dir, ids, tgt_len, tmp_path, extra=()):
    """Runs `xlserve eval --ids` and returns the per-position NLLs (nats)."""
    ids_file = os.path.join(tmp_path, f"ids_{tgt_len}.txt")
    out = os.path.join(tmp_path, f"nll_{tgt_len}.txt")
    with open(ids_file, "w") as f:
        f.write(" ".join(str(int(i)) for i in ids) + "\n")
    cmd = [binary, "eval", "--model", str(model_dir), "--ids", ids_file, "--tgt-len",
           str(tgt_len), "--dump-nll", out, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}"
    return np.loadtxt(out, dtype=np.float64).reshape(-1)


def randomize(module, seed):
    """Overwrites every parameter of MODULE from a generator seeded with SEED (layer-norm gains
    around 1, the rest N(0, 0.3^2)): a random model far from its init; returns MODULE."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "layer_norm.weight" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return module


def report(name, diff):
    """Prints a parity number so `pytest -s` / the CI log shows it."""
    print(f"\nPARITY {name}: max |dNLL| = {diff:.3g} nats")


def run_py(args, env_extra=None, timeout=300):
    env = dict(os.environ)
    env["PYTHONPATH"] = TOOLS + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          timeout=timeout)

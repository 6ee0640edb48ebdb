#!/usr/bin/python3
"""bench/torch_compare.py: the C engine against a PyTorch Transformer-XL on the same weights and
the same thread count, measured side by side in one run (this machine is shared and noisy, so only
the ratios of one run mean anything).

PyTorch runs the trainer's module (tools/xltrain/model.py), written the reference's way:
incremental decoding feeds one token with the memory and re-projects the whole memory through
qkv_net at every step (as kimiyoung/transformer-xl and Hugging Face do); segment evaluation feeds
tgt_len tokens at a time with memory. xlserve runs `xlserve bench` (cached keys/values).
Before timing, both score the same token stream and must agree to 1e-4 (same model, same maths).

usage: bench/torch_compare.py [--model DIR] [--xlserve BIN] [--threads N] [--decode-steps K]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from xltrain.model import evaluate_stream, load_model_dir  # noqa: E402


def torch_decode_rate(model, ids, mem_len, steps):
    """Tokens/s of one-token decoding with a full memory (log-probs over the vocabulary out)."""
    with torch.no_grad():
        _, mems = model(ids[None, :mem_len])
        t0 = time.perf_counter()
        for t in range(steps):
            pos = mem_len + t
            _, mems = model(ids[None, pos:pos + 1], mems)
        return steps / (time.perf_counter() - t0)


def torch_segment_rate(model, ids, mem_len, tgt_len, segments):
    with torch.no_grad():
        _, mems = model(ids[None, :mem_len])
        t0 = time.perf_counter()
        for s in range(segments):
            a = mem_len + s * tgt_len
            _, mems = model(ids[None, a:a + tgt_len], mems, ids[None, a + 1:a + tgt_len + 1])
        return segments * tgt_len / (time.perf_counter() - t0)


def xlserve_rates(binary, model_dir, threads, seconds, tgt_len):
    out = subprocess.run([binary, "bench", "--model", model_dir, "--threads", str(threads),
                          "--seconds", str(seconds), "--tgt-len", str(tgt_len), "--max-batch", "1",
                          "--no-recurrence"], check=True, capture_output=True, text=True).stdout
    dec = float(re.search(r"decode, batch 1,.*?aggregate\s+([0-9.]+)", out).group(1))
    seg = float(re.search(r"segment evaluation \([^)]*\)\s+([0-9.]+)", out).group(1))
    return dec, seg


def parity(binary, model, model_dir, ids, tgt_len):
    """Max |NLL difference| between the engine and PyTorch on the same stream."""
    ref = evaluate_stream(model, ids, tgt_len).numpy()
    with tempfile.TemporaryDirectory() as tmp:
        ids_path, nll_path = os.path.join(tmp, "ids"), os.path.join(tmp, "nll")
        with open(ids_path, "w") as f:
            f.write(" ".join(str(int(x)) for x in ids))
        subprocess.run([binary, "eval", "--model", model_dir, "--ids", ids_path, "--tgt-len",
                        str(tgt_len), "--dump-nll", nll_path], check=True, capture_output=True)
        ours = np.loadtxt(nll_path)
    return float(np.max(np.abs(ours - ref)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "austen-byte"))
    ap.add_argument("--xlserve", default=os.path.join(ROOT, "build", "xlserve"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--decode-steps", type=int, default=100)
    ap.add_argument("--segments", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=3.0, help="per xlserve measurement")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    model = load_model_dir(args.model)
    cfg = model.cfg
    mem_len, tgt_len = cfg.mem_len, cfg.tgt_len or 128
    gen = torch.Generator().manual_seed(1)
    n = mem_len + max(args.decode_steps, args.segments * tgt_len) + 2
    ids = torch.randint(0, cfg.vocab_size, (n,), generator=gen)

    diff = parity(args.xlserve, model, args.model, ids[:min(n, 3 * mem_len + 5)], tgt_len)
    print(f"model {args.model}: n_layer {cfg.n_layer}, d_model {cfg.d_model}, mem_len {mem_len}, "
          f"tgt_len {tgt_len}; threads {args.threads} (torch.set_num_threads and OpenBLAS)")
    print(f"parity: max |NLL(xlserve) - NLL(PyTorch)| = {diff:.2e} over {3 * mem_len + 4} tokens")
    if diff > 1e-4:
        print("parity FAILED: the two implementations disagree; timings would be meaningless")
        return 1

    t_dec = torch_decode_rate(model, ids, mem_len, args.decode_steps)
    t_seg = torch_segment_rate(model, ids, mem_len, tgt_len, args.segments)
    x_dec, x_seg = xlserve_rates(args.xlserve, args.model, args.threads, args.seconds, tgt_len)
    print(f"{'measurement':48s} {'PyTorch tok/s':>14s} {'xlserve tok/s':>14s} {'ratio':>8s} "
          f"{'target':>7s}")
    print(f"{'decode, batch 1, memory full':48s} {t_dec:14.1f} {x_dec:14.1f} "
          f"{x_dec / t_dec:7.1f}x {'20x':>7s}")
    print(f"{'segment evaluation (tgt_len %d, mem_len %d)' % (tgt_len, mem_len):48s} "
          f"{t_seg:14.1f} {x_seg:14.1f} {x_seg / t_seg:7.1f}x {'5x':>7s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

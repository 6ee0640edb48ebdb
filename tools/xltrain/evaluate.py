#!/usr/bin/python3
"""The trainer's own evaluation: bits per byte of a text file (default: the corpus test split)
with the memory-carrying loop of the reference (segments of tgt_len, memory carried, EMPTY
initial memory), at a chosen tgt_len / mem_len / same_length. Reads an exported model directory
or a training checkpoint. Optionally dumps per-position NLLs (natural log, one per line) in
the format of `xlserve eval --dump-nll`.

    /usr/bin/python3 tools/xltrain/evaluate.py --model models/austen-byte \\
        [--text corpus-data/test.txt] [--tgt-len 128] [--mem-len 256] [--dump-nll FILE]
"""
import argparse
import math
import os
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from xltrain.data import load_bytes  # noqa: E402
from xltrain.model import (TransfoXLLM, evaluate_stream, load_model_dir,  # noqa: E402
                           XLConfig)


def load_any(path):
    if os.path.isdir(path):
        return load_model_dir(path)
    ck = torch.load(path, map_location="cpu")
    from xltrain.train import make_config
    import argparse as _ap
    cfg = make_config(_ap.Namespace(**ck["args"]))
    model = TransfoXLLM(cfg)
    model.load_state_dict(ck["model"])
    model.eval()
    return model


def read_ids(path):
    with open(path) as f:
        return torch.tensor([int(t) for t in f.read().split()], dtype=torch.long)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", required=True, help="model directory or checkpoint.pt")
    ap.add_argument("--text", default="corpus-data/test.txt", help="text file scored as bytes")
    ap.add_argument("--ids", help="score these whitespace-separated ids instead of --text")
    ap.add_argument("--tgt-len", type=int, help="segment length (default: config tgt_len)")
    ap.add_argument("--mem-len", type=int, help="memory length (default: config mem_len)")
    ap.add_argument("--same-length", choices=["on", "off"], help="override same_length")
    ap.add_argument("--clamp-len", type=int, help="override clamp_len")
    ap.add_argument("--max-bytes", type=int, default=0, help="score only the first N bytes")
    ap.add_argument("--dump-nll", help="write per-position NLLs (natural log), one per line")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = load_any(args.model)
    cfg: XLConfig = model.cfg
    if args.mem_len is not None:
        cfg.mem_len = args.mem_len
    if args.same_length is not None:
        cfg.same_length = args.same_length == "on"
    if args.clamp_len is not None:
        cfg.clamp_len = args.clamp_len
    tgt_len = args.tgt_len or cfg.tgt_len
    ids = read_ids(args.ids) if args.ids else load_bytes(args.text)
    if args.max_bytes > 0:
        ids = ids[:args.max_bytes]
    t0 = time.time()
    nll = evaluate_stream(model, ids, tgt_len).double()
    dt = time.time() - t0
    if args.dump_nll:
        with open(args.dump_nll, "w") as f:
            for v in nll.tolist():
                f.write(f"{v:.9g}\n")
    mean = float(nll.mean())
    print(f"positions {nll.numel()} tgt_len {tgt_len} mem_len {cfg.mem_len} "
          f"same_length {cfg.same_length} clamp_len {cfg.clamp_len}: "
          f"nll {mean:.6f} nats, bpc {mean / math.log(2):.4f} ({dt:.1f}s)")
    return mean / math.log(2)


if __name__ == "__main__":
    main()

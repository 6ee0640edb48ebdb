"""The training loop: Adam with linear warm-up and cosine decay over progress
max(step / max_steps, elapsed / time_budget), gradient clipping, periodic validation (bpc),
resumable checkpoints, and export of the model directory (tools/xlmodel/model_dir.py)."""
import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch

from xlmodel import model_dir
from xltrain.data import StreamBatcher, load_split
from xltrain.model import TransfoXLLM, XLConfig, evaluate_streams

LN2 = math.log(2.0)


def build_argparser():
    ap = argparse.ArgumentParser(description="Train a byte-level Transformer-XL (xlserve).")
    a = ap.add_argument
    a("--data", default="corpus-data", help="directory with train.txt/valid.txt (tools/corpus)")
    a("--run-dir", default="runs/austen", help="checkpoints and log go here")
    a("--export", help="write the final model directory here (config.json, model.safetensors)")
    a("--resume", action="store_true", help="continue from RUN_DIR/checkpoint.pt")
    a("--seed", type=int, default=1)
    a("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a("--threads", type=int, default=2, help="torch CPU threads")
    # model
    a("--n-layer", type=int, default=6)
    a("--d-model", type=int, default=256)
    a("--n-head", type=int, default=8)
    a("--d-head", type=int, default=32)
    a("--d-inner", type=int, default=1024)
    a("--d-embed", type=int, default=0, help="embedding width (default: d_model)")
    a("--cutoffs", default="", help="adaptive embedding/softmax cutoffs over the 256 byte ids, "
      "e.g. 64,128 (default: none, plain softmax)")
    a("--div-val", type=int, default=1, help="adaptive embedding width divisor per cluster")
    a("--pre-lnorm", action="store_true")
    a("--no-same-length", dest="same_length", action="store_false")
    a("--clamp-len", type=int, default=-1)
    a("--tied-r", dest="untie_r", action="store_false", help="one r_w/r_r bias for all layers")
    a("--dropout", type=float, default=0.1)
    a("--dropatt", type=float, default=0.0)
    # schedule
    a("--batch", type=int, default=16, help="parallel streams per step")
    a("--tgt-len", type=int, default=128)
    a("--mem-len", type=int, default=256)
    a("--lr", type=float, default=1e-3)
    a("--min-lr-ratio", type=float, default=0.02, help="cosine floor as a fraction of --lr")
    a("--warmup", type=int, default=200, help="linear warm-up steps")
    a("--clip", type=float, default=0.25, help="gradient norm clip")
    a("--max-steps", type=int, default=100000)
    a("--time-budget", type=float, default=0.0, help="seconds; 0 = steps only")
    a("--log-interval", type=int, default=20)
    a("--eval-interval", type=int, default=500)
    a("--eval-bytes", type=int, default=65536, help="valid bytes scored at each validation")
    a("--eval-streams", type=int, default=16, help="validation text cut into this many streams")
    a("--ckpt-seconds", type=float, default=600.0, help="checkpoint at least this often")
    a("--stop-after", type=int, default=0,
      help="stop (checkpoint, no export) after this many steps of this invocation (tests)")
    return ap


def make_config(args):
    cutoffs = [int(c) for c in str(getattr(args, "cutoffs", "") or "").replace(",", " ").split()]
    if cutoffs and (cutoffs != sorted(set(cutoffs)) or cutoffs[0] <= 0 or cutoffs[-1] >= 256):
        raise SystemExit(f"--cutoffs {args.cutoffs}: want increasing ids in (0, 256)")
    return XLConfig(vocab_size=256, cutoffs=cutoffs, d_model=args.d_model,
                    d_embed=getattr(args, "d_embed", 0) or args.d_model,
                    n_head=args.n_head, d_head=args.d_head, d_inner=args.d_inner,
                    div_val=getattr(args, "div_val", 1),
                    pre_lnorm=args.pre_lnorm, n_layer=args.n_layer, tgt_len=args.tgt_len,
                    mem_len=args.mem_len, clamp_len=args.clamp_len, same_length=args.same_length,
                    untie_r=args.untie_r, dropout=args.dropout, dropatt=args.dropatt)


def lr_at(args, step, progress):
    warm = min(1.0, (step + 1) / max(1, args.warmup))
    cos = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return args.lr * warm * (args.min_lr_ratio + (1.0 - args.min_lr_ratio) * cos)


def progress_of(args, step, elapsed):
    p = step / args.max_steps if args.max_steps > 0 else 0.0
    if args.time_budget > 0:
        p = max(p, elapsed / args.time_budget)
    return p


def export_model(model, out_dir, extra_meta=None):
    cfg = model.hf_config()
    cfg["xlserve_tokenizer"] = "bytes"
    return model_dir.write_model_dir(out_dir, cfg, model.hf_tensors(),
                                     metadata=dict(extra_meta or {}, producer="tools/train.py"))


def validate(model, valid, args):
    ids = valid[:args.eval_bytes + 1] if args.eval_bytes > 0 else valid
    return evaluate_streams(model, ids, args.tgt_len, args.eval_streams) / LN2


def log(run_dir, msg):
    line = time.strftime("%H:%M:%S ") + msg
    print(line, flush=True)
    with open(os.path.join(run_dir, "train.log"), "a") as f:
        f.write(line + "\n")


def tune_malloc():
    """glibc returns big freed blocks to the OS (mmap) and every training step then page-faults
    fresh activation buffers; keeping them in the heap is worth ~1.5x on CPU."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
        libc.mallopt(M_MMAP_THRESHOLD, 1 << 30)   # the maximum glibc accepts (32 MiB cap on some)
        libc.mallopt(M_TRIM_THRESHOLD, (1 << 31) - 1)
        libc.mallopt(M_TOP_PAD, 256 << 20)
    except (OSError, AttributeError):
        pass


def main(argv=None):
    args = build_argparser().parse_args(argv)
    if args.device == "cpu":
        tune_malloc()
    torch.set_num_threads(args.threads)
    os.makedirs(args.run_dir, exist_ok=True)
    ckpt_path = os.path.join(args.run_dir, "checkpoint.pt")
    dev = torch.device(args.device)

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    train = load_split(args.data, "train")
    valid = load_split(args.data, "valid")

    if args.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, map_location="cpu")
        saved = ck["args"]
        # The model and schedule come from the checkpoint; only bookkeeping flags may change.
        for k in ("data", "run_dir", "export", "resume", "device", "threads", "log_interval",
                  "eval_interval", "ckpt_seconds", "stop_after"):
            saved[k] = getattr(args, k)
        args = argparse.Namespace(**saved)
    else:
        ck = None
    cfg = make_config(args)
    model = TransfoXLLM(cfg).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    batcher = StreamBatcher(train, args.batch, args.tgt_len, args.seed)
    step, elapsed, tokens, mems, best = 0, 0.0, 0, None, None
    if ck is not None:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        batcher.state = ck["batcher"]
        step, elapsed, tokens, best = ck["step"], ck["elapsed"], ck["tokens"], ck.get("best")
        mems = [m.to(dev) for m in ck["mems"]] if ck["mems"] is not None else None
        torch.set_rng_state(ck["rng"])
        log(args.run_dir, f"resumed at step {step}, {elapsed:.0f}s, {tokens} tokens")
    else:
        with open(os.path.join(args.run_dir, "args.json"), "w") as f:
            json.dump(vars(args), f, indent=1)
        nparam = sum(p.numel() for p in model.parameters())
        log(args.run_dir, f"start: {nparam} parameters, config {cfg.to_dict()}, "
            f"train {train.numel()} bytes, argv {sys.argv[1:]}")

    def save():
        tmp = ckpt_path + ".tmp"
        torch.save({"args": vars(args), "model": model.state_dict(), "opt": opt.state_dict(),
                    "batcher": dict(batcher.state), "step": step, "elapsed": elapsed,
                    "tokens": tokens, "best": best, "rng": torch.get_rng_state(),
                    "mems": [m.cpu() for m in mems] if mems is not None else None}, tmp)
        os.replace(tmp, ckpt_path)

    model.train()
    t_start = time.time() - elapsed
    last_ckpt = time.time()
    win_t, win_tok, win_loss, win_n = time.time(), 0, 0.0, 0
    first_step = step
    while True:
        if args.stop_after and step - first_step >= args.stop_after:
            elapsed = time.time() - t_start
            save()
            log(args.run_dir, f"stopped after {step - first_step} steps (--stop-after)")
            return model
        elapsed = time.time() - t_start
        progress = progress_of(args, step, elapsed)
        if progress >= 1.0:
            break
        lr = lr_at(args, step, progress)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y, new_epoch = batcher.next()
        if new_epoch:
            mems = None
        x, y = x.to(dev), y.to(dev)
        nll, mems = model(x, mems, y)
        loss = nll.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        step += 1
        tokens += x.numel()
        win_tok += x.numel()
        win_loss += float(loss)
        win_n += 1
        if step % args.log_interval == 0:
            now = time.time()
            log(args.run_dir, f"step {step} epoch {batcher.state['epoch']} progress {progress:.3f} "
                f"lr {lr:.2e} loss {win_loss / win_n:.4f} bpc {win_loss / win_n / LN2:.4f} "
                f"gnorm {float(gnorm):.2f} tok/s {win_tok / (now - win_t):.0f} "
                f"tokens {tokens} elapsed {now - t_start:.0f}s")
            win_t, win_tok, win_loss, win_n = now, 0, 0.0, 0
        if args.eval_interval > 0 and step % args.eval_interval == 0:
            t0 = time.time()
            bpc = validate(model, valid, args)
            best = bpc if best is None else min(best, bpc)
            log(args.run_dir, f"valid step {step} bpc {bpc:.4f} (best {best:.4f}, "
                f"{time.time() - t0:.0f}s)")
            win_t = time.time()
        if time.time() - last_ckpt >= args.ckpt_seconds:
            elapsed = time.time() - t_start
            save()
            last_ckpt = time.time()
    elapsed = time.time() - t_start
    save()
    bpc = validate(model, valid, args)
    log(args.run_dir, f"done: step {step}, {tokens} tokens, {elapsed:.0f}s, "
        f"{tokens / max(elapsed, 1e-9):.0f} tok/s, valid bpc {bpc:.4f}")
    if args.export:
        export_model(model, args.export, {"train_steps": step, "train_tokens": tokens,
                                          "train_seconds": f"{elapsed:.0f}"})
        log(args.run_dir, f"exported {args.export}")
    return model

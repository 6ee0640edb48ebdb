#!/usr/bin/python3
"""What the largest released TensorFlow model (lm1b: 24 layers, d_model 1280, d_inner 8192,
div_val 4, ~793k words) takes to convert and to load, measured on a random checkpoint of exactly
its shapes: the bundle is written by the test-side writer (tests/tools/tf_bundle_writer.py) in
the released archive layout, converted with `tools/convert.py tf --preset lm1b` (f32, then
--weights bf16), and loaded with `xlserve info --weights f32|bf16|int8`. Each step runs as its
own process; the table gives its wall time and peak resident memory (getrusage ru_maxrss of
that child). Needs ~9 GB of disk under --work and ~8 GB of RAM for the writing step.

  /usr/bin/python3 bench/tf_lm1b_scale.py --xlserve build/xlserve --work /tmp/lm1b-scale
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))

from authors_tf_layout import SOTA_FLAGS, authors_tf_names  # noqa: E402
import tf_bundle_writer  # noqa: E402
from xlconvert import tf_bundle  # noqa: E402


def run_measured(cmd, work):
    """(wall seconds, peak RSS bytes of that child, its stdout) of CMD."""
    out_path, err_path = os.path.join(work, "child.out"), os.path.join(work, "child.err")
    t0 = time.monotonic()
    with open(out_path, "w") as out, open(err_path, "w") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        with open(err_path) as f:
            sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{f.read()}")
    with open(out_path) as f:
        return wall, ru.ru_maxrss * 1024, f.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--xlserve", default=os.path.join(ROOT, "build", "xlserve"))
    ap.add_argument("--work", required=True, help="scratch directory (removed at the end)")
    ap.add_argument("--vocab", type=int, default=793471)
    ap.add_argument("--write-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    archive = os.path.join(args.work, "tf_lm1b")
    if args.write_only:
        write_checkpoint(archive, args.vocab)
        return
    # the checkpoint is made in a child process, so that this one stays small: a child forked
    # from a process holding the 3.4 GB of tensors would start with that in its peak RSS
    t0 = time.monotonic()
    subprocess.run([sys.executable, os.path.abspath(__file__), "--work", args.work,
                    "--vocab", str(args.vocab), "--write-only"], check=True)
    t_write = time.monotonic() - t0
    with open(os.path.join(archive, "n_params")) as f:
        n_params = int(f.read())
    ckpt_bytes = sum(os.path.getsize(os.path.join(archive, "model", p))
                     for p in os.listdir(os.path.join(archive, "model")))
    measure(args, archive, n_params, ckpt_bytes, t_write)


def write_checkpoint(archive, vocab):
    flags = dict(SOTA_FLAGS["lm1b"], n_token=vocab)
    os.makedirs(os.path.join(archive, "model"), exist_ok=True)
    os.makedirs(os.path.join(archive, "data"), exist_ok=True)

    # the random checkpoint (the writer's byte-at-a-time crc32c would take minutes at 3.4 GB:
    # it is given the reader's vectorised one, which the tests check against known values)
    tf_bundle_writer.crc32c = tf_bundle.crc32c
    rng = np.random.default_rng(0)
    tensors = {}
    for name, shape in authors_tf_names(flags):
        a = rng.standard_normal(shape, dtype=np.float32)
        a *= 0.02
        if name.endswith("LayerNorm/gamma"):
            a += 1.0
        tensors[name] = a
    n_params = sum(a.size for a in tensors.values())
    tf_bundle_writer.write_bundle(os.path.join(archive, "model", "model.ckpt-1191000"), tensors)
    with open(os.path.join(archive, "n_params"), "w") as f:
        f.write(str(n_params))
    with open(os.path.join(archive, "model", "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "model.ckpt-1191000"\n')
    syms = ["<S>", "</S>", "<UNK>"] + [f"w{i}" for i in range(vocab - 3)]
    with open(os.path.join(archive, "data", "1b_word_vocab.txt"), "w") as f:
        f.writelines(f"{s} {vocab - i}\n" for i, s in enumerate(syms))
    with open(os.path.join(archive, "data", "corpus-info.json"), "w") as f:
        json.dump({"vocab_size": vocab, "dataset": "lm1b",
                   "cutoffs": [0] + flags["cutoffs"] + [vocab]}, f)


def measure(args, archive, n_params, ckpt_bytes, t_write):
    rows = []
    convert = [sys.executable, os.path.join(ROOT, "tools", "convert.py"), "tf", archive]
    vocab = ["--vocab", os.path.join(archive, "data", "1b_word_vocab.txt"), "--preset", "lm1b"]
    outs = {}
    for stored in ("f32", "bf16"):
        out = os.path.join(args.work, f"out_{stored}")
        wall, rss, _ = run_measured(convert + [out] + vocab + ["--weights", stored], args.work)
        size = os.path.getsize(os.path.join(out, "model.safetensors"))
        rows.append((f"convert.py tf --preset lm1b --weights {stored}", wall, rss,
                     f"model.safetensors {size / 2**30:.2f} GiB"))
        outs[stored] = out
    for stored, w in (("f32", "f32"), ("f32", "bf16"), ("f32", "int8"), ("bf16", "bf16"),
                      ("bf16", "int8")):
        wall, rss, text = run_measured([args.xlserve, "info", "--model", outs[stored],
                                        "--weights", w], args.work)
        line = next((ln for ln in text.splitlines() if ln.startswith("weights")), "")
        rows.append((f"xlserve info --weights {w} ({stored} file)", wall, rss,
                     line.split(None, 1)[1] if line else ""))

    print(f"lm1b shapes: {n_params:,} parameters, vocabulary {args.vocab:,}; checkpoint "
          f"{ckpt_bytes / 2**30:.2f} GiB (written in {t_write:.0f} s)")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, "
          f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB RAM")
    print()
    print("| step | wall s | peak RSS | notes |")
    print("|---|---:|---:|---|")
    for name, wall, rss, note in rows:
        print(f"| `{name}` | {wall:.1f} | {rss / 2**30:.2f} GiB | {note} |")
    shutil.rmtree(args.work)


if __name__ == "__main__":
    main()

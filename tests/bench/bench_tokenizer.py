#!/usr/bin/env python3
"""bench_tokenizer.py: the tokenizer kinds' speed, encode and decode (MB/s of text, us per
token), next to the time one forward step of the bundled model takes per token, all measured
in one run with `xlserve tokenize --bench`. The text is the repository's README and the bundled
model's card repeated to --mb megabytes; the transfo_xl vocabulary is its most frequent words
(so most words are found, as with wt103's 267k), the table kinds use text8/enwik8-shaped
vocabularies on tiny random models (the tokenizer's cost does not depend on the model).

Usage: python3 tests/bench/bench_tokenizer.py [--bin build/xlserve] [--mb 2]
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import xlharness as X  # noqa: E402


def make(tmp, name, kind, vocab, options=None):
    d = os.path.join(tmp, name)
    X.write_tiny_model(d, vocab_size=max(len(vocab), 256))
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg["xlserve_tokenizer"] = kind
    if options:
        cfg["xlserve_tokenizer_options"] = options
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    syms = list(vocab) + [f"<filler{i}>" for i in range(cfg["vocab_size"] - len(vocab))]
    with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(s + "\n" for s in syms))
    return d


def bench(binary, model, path):
    out = subprocess.run([binary, "tokenize", "--model", model, "--bench", path], check=True,
                         capture_output=True, text=True).stdout
    num = lambda key, pat: float(re.search(key + r"\s+" + pat, out).group(1))  # noqa: E731
    return dict(enc=num("encode", r"([\d.]+) MB/s"), dec=num("decode", r"([\d.]+) MB/s"),
                enc_us=float(re.search(r"encode.*?([\d.]+) us/token", out).group(1)),
                dec_us=float(re.search(r"decode.*?([\d.]+) us/token", out).group(1)),
                step=float(re.search(r"forward step\s+([\d.]+) us/token", out).group(1)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "xlserve"))
    ap.add_argument("--mb", type=float, default=2.0)
    a = ap.parse_args()
    src = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read() + \
        open(os.path.join(ROOT, "models", "austen-byte", "MODEL_CARD.md"), encoding="utf-8").read()
    text = (src * (int(a.mb * 1e6) // len(src.encode()) + 1))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "text.txt")
        open(path, "w", encoding="utf-8").write(text)
        words = collections.Counter(re.findall(r"\w+|[^\w\s]", text))
        wt = ["<eos>", "<unk>", "<formula>", "@-@", "@,@", "@.@"] + \
            [w for w, _ in words.most_common(30000) if w not in ("<eos>", "<unk>")]
        models = [
            ("transfo_xl", make(tmp, "wt", "transfo_xl", wt)),
            ("char_table", make(tmp, "t8", "char_table", ["_"] + [chr(c) for c in range(97, 123)],
                                {"unknown": "drop", "spell_digits": True})),
            ("byte_table", make(tmp, "e8", "byte_table", [str(b) for b in range(256)])),
            ("bytes (bundled model)", os.path.join(ROOT, "models", "austen-byte")),
        ]
        rows = [(name, bench(a.bin, d, path)) for name, d in models]
    fwd = rows[-1][1]["step"]
    print(f"text: {len(text.encode()) / 1e6:.1f} MB; forward step of the bundled model "
          f"(models/austen-byte, batch 1): {fwd:.0f} us/token\n")
    print("| kind | encode MB/s | decode MB/s | encode + decode us/token | "
          "/ bundled forward step |")
    print("|---|---:|---:|---:|---:|")
    for name, r in rows:
        per = r["enc_us"] + r["dec_us"]
        print(f"| {name} | {r['enc']:.1f} | {r['dec']:.1f} | {per:.2f} | {per / fwd:.4f} |")


if __name__ == "__main__":
    main()

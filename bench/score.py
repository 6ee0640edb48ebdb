#!/usr/bin/python3
"""bench/score.py: what prompt scoring over HTTP costs next to `xlserve eval` on the same text,
measured side by side in one run. The same text is scored by `xlserve eval --dump-nll` (the CLI's
own segment loop) and by the REAL daemon (`xlserve serve` on 127.0.0.1) with
/v1/completions `echo: true`, `max_tokens: 0` and `logprobs` 0 (the scored tokens only) and 5
(alternatives too: every row's whole distribution). Prints, per way, the best wall time of
--rounds, tokens/s, the ratio to eval, and the largest difference of the per-token log-probs
from eval's (the same numbers, to 1e-5).

usage: bench/score.py [--model DIR] [--xlserve BIN] [--bytes 200000] [--rounds 3]
                      [--threads N]
Standard library only (Debian's /usr/bin/python3).
"""
import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ("the of and to a in that was her it his she he not be as had with for you which but "
         "could very would have said all so mr mrs elizabeth darcy bennet been no my they "
         "such any is what at by on were much more must being will only time than own").split()


def text_of(n, seed=1):
    rng = random.Random(seed)
    out, size = [], 0
    while size < n:
        w = rng.choice(WORDS)
        w = w.capitalize() if rng.random() < 0.08 else w
        w += "." if rng.random() < 0.06 else ("," if rng.random() < 0.08 else "")
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


def start_daemon(xlserve, model, threads):
    args = [xlserve, "serve", "--model", model, "--host", "127.0.0.1", "--port", "0",
            "--max-prompt-tokens", "16000000",
            "--max-body-bytes", "1000000000", "--workers", "1"]
    if threads:
        args += ["--blas-threads", str(threads)]
    p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    port = None
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if o.get("event") == "listening":
            port = o["port"]
        if port and o.get("event") in ("ready", "model_loaded"):
            break
    if not port:
        p.kill()
        sys.exit("the daemon did not start")
    for _ in range(600):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return p, port
        except OSError:
            pass
        time.sleep(0.1)
    p.kill()
    sys.exit("the daemon never became ready")


def score(port, text, logprobs):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    body = json.dumps({"prompt": text, "echo": True, "max_tokens": 0, "logprobs": logprobs})
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    dt = time.monotonic() - t0
    if r.status != 200:
        sys.exit("scoring failed: %d %s" % (r.status, data[:300]))
    return dt, json.loads(data)["choices"][0]["logprobs"]["token_logprobs"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "austen-byte"))
    ap.add_argument("--xlserve", default=os.path.join(ROOT, "build", "xlserve"))
    ap.add_argument("--bytes", type=int, default=200000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    text = text_of(a.bytes)
    n = len(text.encode())
    with tempfile.TemporaryDirectory() as tmp:
        src, nll = os.path.join(tmp, "t.txt"), os.path.join(tmp, "t.nll")
        with open(src, "w") as f:
            f.write(text)
        best_eval = None
        for _ in range(a.rounds):
            cmd = [a.xlserve, "eval", "--model", a.model, "--text", src, "--dump-nll", nll]
            if a.threads:
                cmd += ["--threads", str(a.threads)]
            t0 = time.monotonic()
            r = subprocess.run(cmd, capture_output=True, text=True)
            dt = time.monotonic() - t0
            if r.returncode:
                sys.exit(r.stderr)
            best_eval = dt if best_eval is None else min(best_eval, dt)
        with open(nll) as f:
            ref = [-float(x) for x in f.read().split()]
        p, port = start_daemon(a.xlserve, a.model, a.threads)
        rows = []
        try:
            for lp in (0, 5):
                best, diff = None, 0.0
                for _ in range(a.rounds):
                    dt, got = score(port, text, lp)
                    best = dt if best is None else min(best, dt)
                    diff = max(abs(x - y) for x, y in zip(got[1:], ref))
                rows.append(("echo logprobs %d" % lp, best, diff))
        finally:
            p.terminate()
            p.wait(30)
    print("text %d bytes (%d tokens), model %s, best of %d" % (n, n, a.model, a.rounds))
    print("%-22s %9s %10s %9s %12s" % ("way", "seconds", "tokens/s", "x eval", "max |diff|"))
    print("%-22s %9.3f %10.0f %9.2f %12s" % ("xlserve eval", best_eval, n / best_eval, 1.0, "-"))
    for name, dt, diff in rows:
        print("%-22s %9.3f %10.0f %9.2f %12.2e" % (name, dt, n / dt, dt / best_eval, diff))


if __name__ == "__main__":
    main()

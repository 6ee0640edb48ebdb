#!/usr/bin/python3
"""bench/prefix_cache.py: time to first token of a NEW conversation with a long system prompt,
with the prefix cache and without it, measured side by side in one run on the REAL daemon.

Two daemons on loopback, same model and options: one with the cache (prefix_cache_mb, its
default), one with --prefix-cache-mb 0. Each round makes a system prompt of --system-tokens
tokens never seen before, then, one request at a time (stateless chat, max_tokens 1, so the
response time is the time to the first token):
  off    the daemon without the cache answers (system, user A)   - a fresh prefill
  miss   the daemon with the cache answers (system, user A)      - a fresh prefill + storing it
  hit    the daemon with the cache answers (system, user B)      - from the cached prefix
  floor  the daemon without the cache answers a prompt as long as what a hit still feeds
and checks the hit's token equals the uncached daemon's for (system, user B) when --verify.
Prints medians over --rounds of the wall time and of the daemon's CPU time per request (steadier
on a shared machine), the ratios to "off" (off/hit is the target; miss shows the cost of
storing an entry), the per-round ratios, the least-disturbed CPU times (the minimum over the
rounds: a hit is memory-bound, so other processes' memory traffic slows it more than the
compute-bound prefill), and the machine.

Model: --model DIR, or a random model of --preset's shape written once into --model-cache
(tools/make_random_model.py: wt103 = 18 layers, d_model 1024, mem_len 1600, 267,735 words,
about 1.1 GB of weights; bundled = the shape of models/austen-byte).

usage: bench/prefix_cache.py [--model DIR | --preset wt103|bundled] [--system-tokens 512]
                             [--rounds 3] [--verify] [--xlserve BIN] [-- DAEMON OPTIONS...]
e.g.   bench/prefix_cache.py --preset wt103 --rounds 3
Standard library only (Debian's /usr/bin/python3); the model generator needs numpy.
"""
import argparse
import http.client
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Daemon:
    def __init__(self, binary, model, extra, timeout=600):
        self.log = tempfile.NamedTemporaryFile(prefix="xlserve-pc-", suffix=".log", delete=False)
        cmd = [binary, "serve", "--model", model, "--host", "127.0.0.1", "--port", "0",
               "--max-tokens-limit", "1000000", *extra]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.log)
        self.port, self.ready = None, None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("daemon exited %s:\n%s" % (self.proc.returncode, self.tail()))
            for o in self.lines():
                if o.get("event") == "listening":
                    self.port = o["port"]
                if o.get("event") == "ready":
                    self.ready = o.get("msg") or o.get("message") or ""
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("daemon not ready in %ss:\n%s" % (timeout, self.tail()))

    def lines(self):
        out = []
        with open(self.log.name, "rb") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def tail(self, n=20):
        with open(self.log.name, "rb") as f:
            return b"".join(f.readlines()[-n:]).decode("utf-8", "replace")

    def cpu(self):
        """CPU seconds (user + system) of the daemon so far."""
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def metrics(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        c.request("GET", "/metrics")
        body = c.getresponse().read().decode()
        c.close()
        out = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.unlink(self.log.name)


def chat(d, system, user):
    """One stateless chat turn, max_tokens 1: (seconds, daemon CPU seconds, the token, prompt
    tokens). No system message when system is None."""
    msgs = [{"role": "system", "content": system}] if system is not None else []
    body = json.dumps({"messages": msgs + [{"role": "user", "content": user}],
                       "max_tokens": 1, "temperature": 0}).encode()
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=3600)
    c0 = d.cpu()
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", body=body,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    payload = r.read()
    dt = time.monotonic() - t0
    cpu = d.cpu() - c0
    c.close()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, payload[:300]))
    b = json.loads(payload)
    return dt, cpu, b["choices"][0]["message"]["content"], b["usage"]["prompt_tokens"]


def words_of(model):
    """Words the model's tokenizer spells as one token each (word models: vocab.txt's)."""
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    vocab = os.path.join(model, "vocab.txt")
    if cfg.get("vocab_size") == 256 and not os.path.exists(vocab):
        return None  # bytes: a token per byte
    with open(vocab, encoding="utf-8") as f:
        ws = [w.strip() for w in f]
    return [w for w in ws[:5000] if w and not w.startswith("<")]


def text_of(rng, words, n):
    """About n tokens: n words (word models) or n bytes."""
    if words is None:
        s = " ".join(rng.choice(["the", "of", "and", "to", "a", "in"]) for _ in range(n))
        return s[:n]
    return " ".join(rng.choice(words) for _ in range(n))


def machine():
    name = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "%s, %d cores" % (name, os.cpu_count() or 0)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="Options after -- go to both daemons.")
    ap.add_argument("--model")
    ap.add_argument("--preset", choices=("wt103", "bundled"), default="wt103")
    ap.add_argument("--model-cache", default=os.path.join(tempfile.gettempdir(),
                                                          "xlserve-bench-models"))
    ap.add_argument("--xlserve", default=os.environ.get("XLSERVE_BIN",
                                                        os.path.join(ROOT, "build", "xlserve")))
    ap.add_argument("--system-tokens", type=int, default=512)
    ap.add_argument("--user-tokens", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--verify", action="store_true",
                    help="also check each hit's token against the uncached daemon's")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=128,
                    help="the daemons' prefill chunk (prefill_chunk, or the model's tgt_len)")
    a = ap.parse_args(argv)
    model = a.model
    if not model:
        model = os.path.join(a.model_cache, a.preset)
        if not os.path.exists(os.path.join(model, "model.safetensors")):
            print("writing a random %s model into %s ..." % (a.preset, model), file=sys.stderr)
            env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tools"))
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_random_model.py"),
                            model, "--preset", a.preset], check=True, env=env)
    rng = random.Random(a.seed)
    words = words_of(model)
    on = Daemon(a.xlserve, model, ["--access-log", "false", *extra])
    off = Daemon(a.xlserve, model, ["--access-log", "false", "--prefix-cache-mb", "0", *extra])
    kinds = ("off", "miss", "hit", "floor")
    wall = {k: [] for k in kinds}
    cpu = {k: [] for k in kinds}
    try:
        chat(on, "warm up", "hello")  # workspaces
        chat(off, "warm up", "hello")
        ptoks = rest = None
        for r in range(a.rounds):
            system = text_of(rng, words, a.system_tokens)
            ua, ub = text_of(rng, words, a.user_tokens), text_of(rng, words, a.user_tokens)
            got = {}
            got["off"] = chat(off, system, ua)
            got["miss"] = chat(on, system, ua)
            got["hit"] = chat(on, system, ub)
            ptoks = got["off"][3]
            # what a hit still feeds, alone: the template's end of the system message (the
            # part past the last whole chunk), the user message, the reply's prompt
            rest = ptoks - ptoks // a.chunk * a.chunk if a.chunk else 0
            got["floor"] = chat(off, None, text_of(rng, words, max(1, rest - 4)))
            for k in kinds:
                wall[k].append(got[k][0])
                cpu[k].append(got[k][1])
            line = "round %d: " % r + ", ".join(
                "%s %.3f s (cpu %.3f)" % (k, got[k][0], got[k][1]) for k in kinds)
            if a.verify:
                ref = chat(off, system, ub)
                if ref[2] != got["hit"][2]:
                    raise RuntimeError("round %d: the hit answered %r, uncached %r"
                                       % (r, got["hit"][2], ref[2]))
                line += "; the hit's token equals the uncached one"
            print(line, file=sys.stderr, flush=True)
        m = on.metrics()
    finally:
        on.stop()
        off.stop()
    mw = {k: statistics.median(v) for k, v in wall.items()}
    mc = {k: statistics.median(v) for k, v in cpu.items()}
    per_round = sorted(o / h for o, h in zip(wall["off"], wall["hit"]))
    print("model %s; %s" % (model, on.ready))
    print("machine: %s" % machine())
    print("system prompt %d words, user message %d: %d prompt tokens, %d from the cache on a hit; "
          "%d rounds (medians); daemon options: %s" % (
              a.system_tokens, a.user_tokens, ptoks, ptoks - rest, a.rounds,
              " ".join(extra) or "defaults"))
    print()
    print("| new conversation, first token | wall s | vs without | daemon CPU s | vs without |")
    print("|---|---|---|---|---|")
    rows = [("without the cache (prefix_cache_mb 0)", "off"),
            ("cache miss (prefill + storing the prefix)", "miss"),
            ("cache hit", "hit"),
            ("floor: the %d tokens a hit still feeds, alone" % rest, "floor")]
    for label, k in rows:
        b = "**" if k == "hit" else ""
        print("| %s | %.3f | %s%.1fx%s | %.3f | %s%.1fx%s |" % (
            label, mw[k], b, mw["off"] / mw[k], b, mc[k], b, mc["off"] / mc[k], b))
    print()
    print("per-round wall ratios without/hit: %s" % ", ".join("%.1fx" % x for x in per_round))
    print("per-round CPU ratios without/hit: %s" % ", ".join(
        "%.1fx" % x for x in sorted(o / h for o, h in zip(cpu["off"], cpu["hit"]))))
    # A hit streams the weights with few rows to reuse them (memory-bound), a fresh prefill is
    # compute-bound: other processes' memory traffic slows the hit more. The least-disturbed
    # sample of each is the closer estimate for a machine of its own.
    print("least disturbed (min daemon CPU over the rounds): without %.3f s, hit %.3f s: %.1fx" % (
        min(cpu["off"]), min(cpu["hit"]), min(cpu["off"]) / min(cpu["hit"])))
    print("prefix cache: %d hits, %d misses, %d tokens saved, %.1f MiB held" % (
        m.get("xlserve_prefix_cache_hits_total", 0), m.get("xlserve_prefix_cache_misses_total", 0),
        m.get("xlserve_prefix_cache_tokens_saved_total", 0),
        m.get("xlserve_prefix_cache_bytes", 0) / 2**20))
    return 0


if __name__ == "__main__":
    sys.exit(main())

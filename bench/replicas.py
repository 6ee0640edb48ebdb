#!/usr/bin/python3
"""bench/replicas.py: several replicas sharing a Redis session store, measured side by side in
one run (redis-server, the daemons and nginx with the shipped config/nginx/xlserve-replicas.conf
are started here on loopback, in a temp dir, and stopped at the end):

  store    the per-turn cost of the store: one daemon on SQLite (state_dir, store_fsync true) and
           one on Redis (AOF, appendfsync always), the same greedy conversation on each, turns
           alternated; the client's turn latency (median) and the daemon's commit time
           (xlserve_store_write_seconds: sum / count), and Redis / SQLite ratios.
  failover kill -9 the replica serving a conversation; the time from the kill to the next turn
           served through nginx (by another replica, which loads the session from Redis),
           against a normal turn's time; the replica is restarted; --kills times.
  load     bench/load.py's streaming chat clients: 1 stream to one replica directly, 1 stream
           through nginx (three replicas behind it), and --streams streams through nginx,
           phases alternated over --rounds; tokens/s, TTFT, errors, and nginx's overhead on one
           stream (1 - tokens/s through nginx / tokens/s direct).

usage: bench/replicas.py [--model DIR] [--xlserve BIN] [--turns 40] [--kills 3] [--streams 8]
                         [--seconds 12] [--rounds 2] [--max-tokens 64] [-- DAEMON OPTIONS...]
Needs redis-server and nginx (tools/install-deps.sh test). Standard library and the test
harness (tests/integration/xlharness.py, tests/deploy/deployharness.py).
"""
import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path[:0] = [os.path.join(ROOT, "bench"), os.path.join(ROOT, "tests", "integration"),
                os.path.join(ROOT, "tests", "deploy"), os.path.join(ROOT, "tools")]
import load  # noqa: E402
import xlharness as X  # noqa: E402
import deployharness as N  # noqa: E402
from redisserver import RedisServer  # noqa: E402
from test_replicas import replicas_config  # noqa: E402


def store_write(port):
    m = X.metrics(port)
    return m.get("xlserve_store_write_seconds_sum", 0.0), m.get("xlserve_store_write_seconds_count", 0.0)


def bench_store(a, tmp, redis, extra):
    sq = X.Daemon(a.model, ["--state-dir", os.path.join(tmp, "sqlite"), *extra])
    rd = X.Daemon(a.model, ["--store", "redis", "--redis-url",
                            "redis://127.0.0.1:%d/0" % redis.port, "--redis-prefix", "bs", *extra])
    lat = {"sqlite": [], "redis": []}
    try:
        for name, d in (("sqlite", sq), ("redis", rd)):  # a first turn each (creation)
            X.complete(d.port, "store-bench", prompt="It is a truth universally acknowledged",
                       max_tokens=a.turn_tokens, temperature=0)
        w0 = {"sqlite": store_write(sq.port), "redis": store_write(rd.port)}
        for k in range(a.turns):
            order = (("sqlite", sq), ("redis", rd)) if k % 2 == 0 else (("redis", rd), ("sqlite", sq))
            for name, d in order:
                t0 = time.monotonic()
                X.complete(d.port, "store-bench", prompt=" and then, turn %d," % k,
                           max_tokens=a.turn_tokens, temperature=0)
                lat[name].append(time.monotonic() - t0)
        w1 = {"sqlite": store_write(sq.port), "redis": store_write(rd.port)}
    finally:
        sq.stop()
        rd.stop()
    out = {}
    for name in lat:
        s = w1[name][0] - w0[name][0]
        n = w1[name][1] - w0[name][1]
        out[name] = (statistics.median(lat[name]), s / n if n else float("nan"))
    print("store: %d turns each (prompt ~20 bytes, %d tokens generated), alternated"
          % (a.turns, a.turn_tokens))
    for name, (med, commit) in out.items():
        print("  %-7s turn latency median %7.2f ms, commit (store_write) mean %7.3f ms"
              % (name, med * 1e3, commit * 1e3))
    print("  redis / sqlite: turn latency %.2fx, commit %.2fx"
          % (out["redis"][0] / out["sqlite"][0], out["redis"][1] / out["sqlite"][1]))


class Cluster:
    def __init__(self, a, tmp, redis, extra):
        self.a, self.redis, self.extra = a, redis, extra
        self.ports = [X.free_port() for _ in range(3)]
        self.replicas = [self.start(i) for i in range(3)]
        self.nginx = N.Nginx(os.path.join(tmp, "nginx"), None,
                             shipped=replicas_config(tmp, self.ports))

    def start(self, i):
        return X.Daemon(self.a.model, ["--store", "redis", "--redis-url",
                                       "redis://127.0.0.1:%d/0" % self.redis.port,
                                       "--trusted-proxies", "127.0.0.1", *self.extra],
                        port=self.ports[i])

    def served_by(self, rid):
        def logged():
            return [i for i, d in enumerate(self.replicas)
                    if any(l.get("request_id") == rid for l in d.requests_logged())]
        X.wait_until(logged, 10, "a replica logs %s" % rid)
        return logged()[0]

    def cpu(self):
        return sum(X.cpu_seconds(d.proc.pid) for d in self.replicas if d.proc.poll() is None)

    def stop(self):
        self.nginx.stop()
        for d in self.replicas:
            d.stop()


def bench_failover(a, c):
    times, normal = [], []
    for k in range(a.kills):
        sid = "failover-%d" % k
        for j in range(3):
            t0 = time.monotonic()
            X.complete(c.nginx.port, sid, headers={"X-Request-Id": "f%d-%d" % (k, j)},
                       prompt=" a turn of the conversation", max_tokens=a.turn_tokens,
                       temperature=0)
            normal.append(time.monotonic() - t0)
        victim = c.served_by("f%d-2" % k)
        t0 = time.monotonic()
        c.replicas[victim].proc.send_signal(signal.SIGKILL)
        X.complete(c.nginx.port, sid, headers={"X-Request-Id": "f%d-after" % k},
                   prompt=" the next turn", max_tokens=a.turn_tokens, temperature=0)
        times.append(time.monotonic() - t0)
        assert c.served_by("f%d-after" % k) != victim
        c.replicas[victim].proc.wait()
        c.replicas[victim] = c.start(victim)
    print("failover: kill -9 of the serving replica -> next turn served through nginx "
          "(session loaded from Redis by another replica): %s ms; a normal turn: median %.1f ms"
          % (", ".join("%.1f" % (t * 1e3) for t in times), statistics.median(normal) * 1e3))


def bench_load(a, c):
    args = argparse.Namespace(turns=4, max_tokens=a.max_tokens, temperature=0.8,
                              seconds=a.seconds, warmup=2.0, long_frac=0.0, long_bytes=1500,
                              seed=1)
    phases = [("direct, 1 stream", c.ports[0], 1), ("nginx, 1 stream", c.nginx.port, 1),
              ("nginx, %d streams" % a.streams, c.nginx.port, a.streams)]
    rows = {p[0]: [] for p in phases}
    for rnd in range(a.rounds):
        for name, port, n in (phases if rnd % 2 == 0 else phases[1::-1] + phases[2:]):
            r = asyncio.run(load.run_phase(port, c, args, n, rnd))  # its clients
            rows[name].append(r)
            print("  round %d, %s: %.1f tokens/s, %d errors" % (rnd, name, r["tok_s"],
                                                              r["errors"]), file=sys.stderr)
    print("load (bench/load.py clients, max_tokens %d, window %.0f s, %d rounds, medians):"
          % (a.max_tokens, a.seconds - 2, a.rounds))
    med = {}
    for name, rs in rows.items():
        tok = statistics.median(r["tok_s"] for r in rs)
        ttft = statistics.median(r["ttft_p50"] for r in rs if r["ttft_p50"] is not None)
        errs = sum(r["errors"] for r in rs)
        med[name] = tok
        print("  %-18s %9.1f tokens/s, TTFT p50 %7.1f ms, errors %d" % (name, tok, ttft * 1e3, errs))
    d, p = med["direct, 1 stream"], med["nginx, 1 stream"]
    print("  nginx overhead on one stream: %.1f%% of direct tokens/s (target <= 10%%)"
          % (100 * (1 - p / d)))
    return sum(r["errors"] for rs in rows.values() for r in rs)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "austen-byte"))
    ap.add_argument("--xlserve", default=os.environ.get("XLSERVE_BIN",
                                                        os.path.join(ROOT, "build", "xlserve")))
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--turn-tokens", type=int, default=16)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=12)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--only", default="store,failover,load")
    a = ap.parse_args(argv)
    os.environ["XLSERVE_BIN"] = a.xlserve
    extra = ["--access-log", "true", "--max-tokens-limit", "1000000", *extra]
    only = set(a.only.split(","))
    errors = 0
    with tempfile.TemporaryDirectory(prefix="xlserve-replicas-") as tmp:
        redis = RedisServer(os.path.join(tmp, "redis"))
        try:
            if "store" in only:
                bench_store(a, tmp, redis, extra)
            if only & {"failover", "load"}:
                c = Cluster(a, tmp, redis, extra)
                try:
                    if "failover" in only:
                        bench_failover(a, c)
                    if "load" in only:
                        errors = bench_load(a, c)
                finally:
                    c.stop()
        finally:
            redis.stop()
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

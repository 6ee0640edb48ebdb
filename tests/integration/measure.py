"""measure.py: the daemon's figures in docs/performance.md (not a test; run by hand).

  /usr/bin/python3 tests/integration/measure.py stream MODEL_DIR [--tokens N] [--bench-seconds S]
      tokens/s of one HTTP SSE stream (client side, memory full) against `xlserve bench`'s
      in-process batch-1 decode on the same model, same BLAS threads (1).
  /usr/bin/python3 tests/integration/measure.py idle MODEL_DIR [--conns N] [--queued N]
      CPU time of the daemon (process and loop thread) over 10 s while N keep-alive connections
      sit idle, then while N streams wait in the queue behind a long prefill.
  /usr/bin/python3 tests/integration/measure.py overload MODEL_DIR [--seconds S] [-- FLAGS...]
      the slow-client attack at max_connections 16 (request_timeout 4, idle_timeout 6, the
      other options at their defaults unless FLAGS say otherwise): 16 sockets from 127.0.0.2
      each drip one byte of a request line every 2 s (a closed one is reopened at once) while 5
      clients ask GET /health, each giving up after 3 s; then everything closes. Prints the
      clients' requests answered during the attack, how long the attacker's sockets lived, how
      soon a new client is answered once they are gone, and how many of 20 after it are.
Env: XLSERVE_BIN (default build/xlserve), PYTHONPATH=tools.
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xlharness as X  # noqa: E402


def bench_decode(model, seconds):
    out = subprocess.run([X.xlserve_bin(), "bench", "--model", model, "--threads", "1",
                          "--seconds", str(seconds), "--max-batch", "1", "--no-recurrence"],
                         capture_output=True, text=True, timeout=900).stdout
    m = re.search(r"decode, batch 1,.*?aggregate\s+([0-9.]+)", out)
    return float(m.group(1)), out


def http_stream(port, tokens, prompt_len=300):
    """Arrival times of the token events of one SSE stream."""
    body = {"prompt": "x" * prompt_len, "max_tokens": tokens, "temperature": 0, "stream": True}
    st, _, ev = X.stream(port, "/v1/completions", body, timeout=600)
    assert st == 200, ev
    return [t for t, data in ev if data.startswith("{")]


def cmd_stream(a):
    d = X.Daemon(a.model, ["--max-tokens-limit", str(a.tokens), "--blas-threads", "1",
                           "--access-log", "false"])
    rates = []
    try:
        for rep in range(a.reps):
            times = http_stream(d.port, a.tokens)
            skip = 300  # measure with the memory full, as the bench does
            n = len(times) - skip - 1
            rates.append(n / (times[-2] - times[skip]))
            b, _ = bench_decode(a.model, a.bench_seconds)
            print("rep %d: HTTP stream %.1f tokens/s, bench decode batch 1 %.1f tokens/s (%.0f%%)"
                  % (rep, rates[-1], b, 100 * rates[-1] / b), flush=True)
    finally:
        d.stop()


def window(pid, seconds):
    p0, l0, t0 = X.cpu_seconds(pid), X.cpu_seconds(pid, pid), time.monotonic()
    time.sleep(seconds)
    return X.cpu_seconds(pid) - p0, X.cpu_seconds(pid, pid) - l0, time.monotonic() - t0


def cmd_idle(a):
    d = X.Daemon(a.model, ["--max-running", "1", "--max-queue", str(a.queued + 10),
                           "--max-connections", str(2 * (a.conns + a.queued) + 100),
                           "--max-prompt-tokens", "16000000", "--max-body-bytes", "20000000",
                           "--access-log", "false"])
    pid = d.proc.pid
    try:
        base = window(pid, a.seconds)
        print("daemon at rest: process %.3f s CPU, loop thread %.3f s in %.1f s" % base, flush=True)
        idle = []
        for i in range(a.conns):
            c = d.conn()
            c.request("GET", "/health")
            c.getresponse().read()
            idle.append(c)
        time.sleep(0.5)
        r = window(pid, a.seconds)
        print("%d idle keep-alive connections: process %.3f s CPU, loop thread %.3f s in %.1f s"
              % ((a.conns,) + r), flush=True)
        blocker = d.conn(timeout=600)
        blocker.request("POST", "/v1/completions", body=json.dumps(
            {"prompt": "z" * a.prefill, "max_tokens": 1, "stream": True}),
            headers={"Content-Type": "application/json"})
        while X.metric(d.port, "xlserve_running") < 1:
            time.sleep(0.05)
        queued = []
        body = json.dumps({"prompt": "q", "max_tokens": 1, "stream": True}).encode()
        for i in range(a.queued):
            s = socket.create_connection(("127.0.0.1", d.port))
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            queued.append(s)
        while X.metric(d.port, "xlserve_queue_depth") < a.queued:
            time.sleep(0.05)
        # the loop thread alone: the worker is busy with the blocker's prefill
        r = window(pid, a.seconds)
        depth = X.metric(d.port, "xlserve_queue_depth")
        print("%d idle connections + %d streams waiting in the queue (depth %d at the end): "
              "loop thread %.3f s CPU in %.1f s (process %.3f s, the worker prefilling)"
              % (a.conns, a.queued, depth, r[1], r[2], r[0]), flush=True)
        for s in queued:
            s.close()
        for c in idle:
            c.close()
        blocker.close()
    finally:
        d.stop()


def cmd_overload(a):
    import test_overload as O  # the attacker and the legitimate clients of the tests
    args = ["--max-connections", "16", "--request-timeout", "4", "--idle-timeout", "6",
            "--access-log", "false", *a.flags]
    d = X.Daemon(a.model, args)
    try:
        drip = O.Dripper(d.port, 16, O.ATTACKER, every=2.0)
        legit = O.Legit(d.port, 5, patience=3.0)
        O.run_attack(d.port, drip, legit, a.seconds)  # closes every socket at its end
        t0 = time.monotonic()
        first = None
        while first is None and time.monotonic() - t0 < 30:
            try:
                if X.request(d.port, "GET", "/health", timeout=3)[0] == 200:
                    first = time.monotonic() - t0
            except OSError:
                pass
        after = 0
        for _ in range(20):
            try:
                after += X.request(d.port, "GET", "/health", timeout=3)[0] == 200
            except OSError:
                pass
        waits, lives = sorted(legit.waits), sorted(drip.lifetimes)
        print("serve %s" % " ".join(args))
        print("attack: 16 sockets from %s, 1 byte per 2 s, %.0f s; 5 clients, patience 3 s"
              % (O.ATTACKER, a.seconds))
        print("during: clients answered %d of %d requests (median wait %.3f s, max %.3f s)" % (
            legit.answered, legit.tried, waits[len(waits) // 2] if waits else -1,
            waits[-1] if waits else -1))
        print("attacker: %d sockets, lived median %.2f s, longest %.2f s; head timeouts %d, "
              "refused per client %d" % (
                  len(lives), lives[len(lives) // 2] if lives else -1, lives[-1] if lives else -1,
                  X.metric(d.port, "xlserve_connections_head_timeout_total"),
                  X.metric(d.port, "xlserve_connections_refused_per_client_total")))
        print("after: first new client answered %s s after the attack ended; then %d/20 answered"
              % ("%.3f" % first if first is not None else "never (30 s)", after), flush=True)
    finally:
        d.stop()


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stream")
    s.add_argument("model")
    s.add_argument("--tokens", type=int, default=6000)
    s.add_argument("--bench-seconds", type=float, default=3,
                   help="length of the in-process measurement (about the stream's length: short "
                        "runs on a shared machine scatter by +-15%%)")
    s.add_argument("--reps", type=int, default=3)
    i = sub.add_parser("idle")
    i.add_argument("model")
    i.add_argument("--conns", type=int, default=1000)
    i.add_argument("--queued", type=int, default=1000)
    i.add_argument("--seconds", type=float, default=10)
    i.add_argument("--prefill", type=int, default=15000000)
    o = sub.add_parser("overload")
    o.add_argument("model")
    o.add_argument("--seconds", type=float, default=20)
    o.add_argument("flags", nargs="*", help="more daemon flags, after --")
    a = ap.parse_args()
    {"stream": cmd_stream, "idle": cmd_idle, "overload": cmd_overload}[a.cmd](a)


if __name__ == "__main__":
    main()

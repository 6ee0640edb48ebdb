#!/usr/bin/python3
"""bench/load.py: the load benchmark: drives the REAL daemon on loopback with
N concurrent streaming chat sessions (N = 1, 8, 32, 64 by default, measured side by side in one
run) and prints one table: aggregate generated tokens/s, time to first token p50/p99,
inter-token latency p50/p99, errors, plus the ratios the issue targets (tokens/s at 32 streams
>= 8x one stream; TTFT p99 at 32 streams < 4x one stream).

Each stream is a client doing multi-turn chat: a session (X-Session-Id), --turns turns, each a
streamed /v1/chat/completions with one new user message, fixed max_tokens and a seed; then a
new session, until the phase's --seconds are up (then the client disconnects, which cancels what
is in flight). Prompts are seeded English-like text; --long-frac of the turns carry a long
message (--long-bytes) to check that long prefills do not starve the other streams.

For each N a fresh daemon is started (`xlserve serve`, 127.0.0.1, port 0, access log off; the
options after `--` are passed through), stopped with SIGTERM at the end of the phase (killed
after 20 s); every wait is bounded. Standard library only (Debian's /usr/bin/python3).

Measured on the client, within the window [start + --warmup, start + --seconds]:
  tok/s     generated tokens delivered in the window / window length (a completed turn's
            usage.completion_tokens spread over its content chunks; a cut turn counts chunks)
  TTFT      request sent -> first chunk with generated content (turns sent in the window)
  ITL       gaps between a turn's consecutive content chunks (held-back text, e.g. a possible
            stop-string prefix, makes one chunk carry several tokens)
  unserved  turns still without a first token when the phase ended, and their longest wait
  rows/fwd  the daemon's mean sessions per batched forward (its /metrics), CPU: daemon and
            client CPU time / window (cores; this machine's cores are shared by both)

usage: bench/load.py [--model DIR] [--xlserve BIN] [--streams 1,8,32,64] [--turns 4]
                     [--max-tokens 64] [--seconds 20] [--warmup 2] [--long-frac 0]
                     [--long-bytes 1500] [--rounds 1] [--json FILE] [-- DAEMON OPTIONS...]
e.g.   bench/load.py --model models/austen-byte -- --workers 2 --blas-threads 1
"""
import argparse
import asyncio
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORDS = ("the of and to a in was her it that she not be as he had you for with his which but "
         "have at is on by all my so were this been would could very any no from an or there "
         "elizabeth emma anne darcy marianne elinor fanny catherine mr mrs miss lady sir sister "
         "mother father brother house letter morning evening walk dinner ball visit friend "
         "heart feeling happiness pleasure manner opinion doubt hope fortune marriage "
         "perhaps indeed certainly however always never often soon again together").split()


def make_text(rng, nbytes):
    out, n = [], 0
    while n < nbytes:
        w = rng.choice(WORDS)
        out.append(w)
        n += len(w) + 1
    s = " ".join(out)[:max(1, nbytes)]
    return s[0].upper() + s[1:] + "?"


def pct(xs, p):
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, int(round(p / 100.0 * len(xs) + 0.5)) - 1))
    return xs[k]


# ---- the daemon --------------------------------------------------------------------------

class Daemon:
    def __init__(self, binary, model, extra, timeout=60):
        self.log = tempfile.NamedTemporaryFile(prefix="xlserve-load-", suffix=".log", delete=False)
        cmd = [binary, "serve", "--model", model, "--host", "127.0.0.1", "--port", "0",
               "--access-log", "false", "--max-tokens-limit", "1000000", *extra]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.log)
        self.port = None
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError("daemon exited %s:\n%s" % (self.proc.returncode, self.tail()))
                with open(self.log.name, "rb") as f:
                    for line in f:
                        try:
                            o = json.loads(line)
                        except ValueError:
                            continue
                        if o.get("event") == "listening":
                            self.port = o["port"]
                        if o.get("event") == "ready":
                            return
                time.sleep(0.05)
            raise RuntimeError("daemon not ready in %ss:\n%s" % (timeout, self.tail()))
        except BaseException:
            self.kill()
            raise

    def tail(self, n=20):
        with open(self.log.name, "rb") as f:
            return b"".join(f.readlines()[-n:]).decode("utf-8", "replace")

    def cpu(self):
        """CPU seconds (user + system) of the daemon so far."""
        try:
            with open("/proc/%d/stat" % self.proc.pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            return float("nan")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._unlink()

    def stop(self):
        rc = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                rc = "killed"
        else:
            rc = self.proc.returncode
        self._unlink()
        return rc

    def _unlink(self):
        try:
            self.log.close()
            os.unlink(self.log.name)
        except OSError:
            pass


# ---- a minimal asyncio HTTP/1.1 client (chunked SSE) --------------------------------------

async def http_get(port, path, timeout=10):
    r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    try:
        w.write(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" % path).encode())
        return await asyncio.wait_for(r.read(), timeout)
    finally:
        w.close()


async def metrics(port):
    """Selected counters/histogram sums from /metrics."""
    try:
        body = (await http_get(port, "/metrics")).decode("utf-8", "replace")
    except (OSError, asyncio.TimeoutError):
        return {}
    out = {}
    for name in ("xlserve_forward_passes_total", "xlserve_forward_rows_total",
                 "xlserve_completion_tokens_total", "xlserve_batch_tokens_sum",
                 "xlserve_batch_tokens_count", "xlserve_forward_seconds_sum"):
        m = re.search(r"^%s (\S+)$" % name, body, re.M)
        if m:
            out[name] = float(m.group(1))
    return out


class Turn:
    __slots__ = ("t_send", "chunks", "usage", "error", "done", "long")

    def __init__(self, t_send, long):
        self.t_send = t_send
        self.chunks = []   # arrival times of chunks carrying generated content
        self.usage = None  # completion_tokens (turn completed)
        self.error = None
        self.done = False
        self.long = long


async def chat_turn(port, sid, content, max_tokens, seed, temperature, turn, timeout):
    body = json.dumps({"messages": [{"role": "user", "content": content}],
                       "max_tokens": max_tokens, "seed": seed, "temperature": temperature,
                       "stream": True, "stream_options": {"include_usage": True},
                       "history": "append"}).encode()
    head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nX-Session-Id: %s\r\nContent-Length: %d\r\n\r\n"
            % (sid, len(body))).encode()
    r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    try:
        turn.t_send = time.monotonic()
        w.write(head + body)
        status = await asyncio.wait_for(r.readline(), timeout)
        parts = status.split(b" ", 2)
        code = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        chunked = False
        length = None
        while True:
            line = await asyncio.wait_for(r.readline(), timeout)
            if line in (b"\r\n", b""):
                break
            k, _, v = line.partition(b":")
            k = k.strip().lower()
            if k == b"transfer-encoding" and b"chunked" in v.lower():
                chunked = True
            elif k == b"content-length":
                length = int(v.strip())
        if code != 200:
            data = await asyncio.wait_for(r.read(length) if length else r.read(), timeout)
            turn.error = "HTTP %d %s" % (code, data[:200].decode("utf-8", "replace"))
            return
        pending = b""
        first = True  # the chat stream opens with a role-only chunk
        while True:
            if chunked:
                size_line = await asyncio.wait_for(r.readline(), timeout)
                if not size_line:
                    turn.error = "connection closed mid-stream"
                    return
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    break
                data = await asyncio.wait_for(r.readexactly(size + 2), timeout)
                data = data[:-2]
            else:
                data = await asyncio.wait_for(r.read(65536), timeout)
                if not data:
                    break
            now = time.monotonic()
            pending += data
            while b"\n\n" in pending:
                ev, pending = pending.split(b"\n\n", 1)
                if not ev.startswith(b"data: "):
                    continue  # ": ping"
                payload = ev[6:]
                if payload == b"[DONE]":
                    turn.done = True
                    return
                if first and b'"role"' in payload:
                    first = False
                    continue
                if b'"error"' in payload and payload.startswith(b'{"error"'):
                    turn.error = payload[:200].decode("utf-8", "replace")
                    continue
                if b'"choices":[]' in payload:  # the usage chunk
                    try:
                        turn.usage = json.loads(payload)["usage"]["completion_tokens"]
                    except (ValueError, KeyError, TypeError):
                        turn.error = "bad usage chunk"
                    continue
                if b'"content":"' in payload and b'"content":""' not in payload:
                    turn.chunks.append(now)
        if not turn.done:
            turn.error = "stream ended without [DONE]"
    finally:
        w.close()


async def stream_client(port, idx, a, n_streams, deadline, turns_out, round_no):
    session_no = 0
    await asyncio.sleep((idx / max(1, n_streams)) * min(0.5, a.warmup / 2))  # stagger starts
    while time.monotonic() < deadline:
        sid = "load-r%d-n%d-s%d-%d" % (round_no, n_streams, idx, session_no)
        for t in range(a.turns):
            if time.monotonic() >= deadline:
                return
            rng = random.Random(a.seed * 1000003 + idx * 7919 + session_no * 131 + t)
            long = rng.random() < a.long_frac
            nbytes = a.long_bytes if long else rng.randint(20, 80)
            turn = Turn(time.monotonic(), long)
            turns_out.append(turn)
            try:
                await chat_turn(port, sid, make_text(rng, nbytes), a.max_tokens,
                                rng.randrange(1 << 31), a.temperature, turn,
                                timeout=max(30.0, a.seconds))
            except asyncio.CancelledError:
                raise
            except (OSError, asyncio.TimeoutError, ValueError, asyncio.IncompleteReadError) as e:
                turn.error = "%s: %s" % (type(e).__name__, e)
            if turn.error and time.monotonic() < deadline:
                await asyncio.sleep(0.05)  # do not spin on a failing daemon
        session_no += 1


async def run_phase(port, daemon, a, n, round_no):
    turns = []
    t0 = time.monotonic()
    deadline = t0 + a.seconds
    w0 = t0 + a.warmup
    tasks = [asyncio.ensure_future(stream_client(port, i, a, n, deadline, turns, round_no))
             for i in range(n)]
    await asyncio.sleep(max(0.0, w0 - time.monotonic()))
    m0, c0, p0 = await metrics(port), daemon.cpu(), time.process_time()
    await asyncio.sleep(max(0.0, deadline - time.monotonic()))
    t_end = time.monotonic()
    c1, p1 = daemon.cpu(), time.process_time()
    m1 = await metrics(port)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return summarize(turns, w0, t_end, m0, m1, (c1 - c0), (p1 - p0), n)


def summarize(turns, w0, w1, m0, m1, daemon_cpu, client_cpu, n):
    span = w1 - w0
    tokens = 0.0
    ttft, itl, errors, unserved, unserved_max, long_ttft = [], [], 0, 0, 0.0, []
    for t in turns:
        if t.error:
            errors += 1
        if t.done and t.usage is not None and t.chunks:
            weight = t.usage / len(t.chunks)
        else:
            weight = 1.0
        tokens += weight * sum(1 for c in t.chunks if w0 <= c <= w1)
        if w0 <= t.t_send <= w1:
            if t.chunks:
                (long_ttft if t.long else ttft).append(t.chunks[0] - t.t_send)
            elif not t.done and not t.error:
                unserved += 1
                unserved_max = max(unserved_max, w1 - t.t_send)
        for x, y in zip(t.chunks, t.chunks[1:]):
            if w0 <= y <= w1:
                itl.append(y - x)
    all_ttft = ttft + long_ttft

    def d(k):
        return m1.get(k, 0) - m0.get(k, 0)
    fw = d("xlserve_forward_passes_total")
    r = {"streams": n, "tok_s": tokens / span, "turns": sum(1 for t in turns if w0 <= t.t_send <= w1),
         "ttft_p50": pct(all_ttft, 50) if all_ttft else None,
         "ttft_p99": pct(all_ttft, 99) if all_ttft else None,
         "ttft_short_p99": pct(ttft, 99) if ttft else None,
         "ttft_long_p99": pct(long_ttft, 99) if long_ttft else None,
         "itl_p50": pct(itl, 50) if itl else None, "itl_p99": pct(itl, 99) if itl else None,
         "itl_max": max(itl) if itl else None,
         "errors": errors, "unserved": unserved, "unserved_max": unserved_max,
         "rows_per_fwd": d("xlserve_forward_rows_total") / fw if fw else None,
         "tokens_per_fwd": d("xlserve_batch_tokens_sum") / d("xlserve_batch_tokens_count")
         if d("xlserve_batch_tokens_count") else None,
         "server_tok_s": d("xlserve_completion_tokens_total") / span,
         "daemon_cpu": daemon_cpu / span, "client_cpu": client_cpu / span, "window_s": span}
    return r


def fmt_ms(x):
    return "%8.1f" % (x * 1e3) if x is not None else "%8s" % "-"


def print_table(rows, a, extra):
    print("xlserve load: model %s, daemon options [%s], %d turns/session, max_tokens %d, "
          "temperature %g, long prompts %.0f%% x %d bytes, window %.1f s (after %.1f s warm-up)"
          % (a.model, " ".join(extra), a.turns, a.max_tokens, a.temperature, 100 * a.long_frac,
             a.long_bytes, a.seconds - a.warmup, a.warmup))
    hdr = ("%7s %10s %8s %8s %8s %8s %8s %7s %9s %9s %8s %8s"
           % ("streams", "tok/s", "TTFTp50", "TTFTp99", "ITLp50", "ITLp99", "ITLmax", "errors",
              "unserved", "rows/fwd", "dCPU", "cCPU"))
    print(hdr)
    print("%7s %10s %8s %8s %8s %8s %8s %7s %9s %9s %8s %8s"
          % ("", "", "ms", "ms", "ms", "ms", "ms", "", "", "", "cores", "cores"))
    for r in rows:
        un = "%d" % r["unserved"] + ("/%.1fs" % r["unserved_max"] if r["unserved"] else "")
        print("%7d %10.1f %s %s %s %s %s %7d %9s %9s %8.2f %8.2f"
              % (r["streams"], r["tok_s"], fmt_ms(r["ttft_p50"]), fmt_ms(r["ttft_p99"]),
                 fmt_ms(r["itl_p50"]), fmt_ms(r["itl_p99"]), fmt_ms(r["itl_max"]), r["errors"], un,
                 "%.1f" % r["rows_per_fwd"] if r["rows_per_fwd"] else "-", r["daemon_cpu"],
                 r["client_cpu"]))
    by = {r["streams"]: r for r in rows}
    if 1 in by and 32 in by:
        one, many = by[1], by[32]
        if one["tok_s"] > 0:
            print("aggregate tokens/s, 32 streams / 1 stream: %.2fx (target >= 8x)"
                  % (many["tok_s"] / one["tok_s"]))
        if one["ttft_p99"] and many["ttft_p99"]:
            print("TTFT p99, 32 streams / 1 stream: %.2fx (target < 4x)"
                  % (many["ttft_p99"] / one["ttft_p99"]))
    if a.long_frac > 0:
        print("TTFT p99 by prompt: " + ", ".join(
            "%d streams short %s / long %s ms" % (r["streams"], fmt_ms(r["ttft_short_p99"]).strip(),
                                                 fmt_ms(r["ttft_long_p99"]).strip())
            for r in rows))


def median_rows(runs):
    """Per stream count, the median of each numeric field over the rounds."""
    out = []
    for i in range(len(runs[0])):
        r = dict(runs[0][i])
        for k, v in r.items():
            vals = [run[i][k] for run in runs if run[i][k] is not None]
            if k != "streams" and isinstance(v, (int, float)) and vals:
                r[k] = statistics.median(vals)
        out.append(r)
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="Options after -- go to `xlserve serve`.")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "austen-byte"))
    ap.add_argument("--xlserve", default=os.environ.get("XLSERVE_BIN",
                                                        os.path.join(ROOT, "build", "xlserve")))
    ap.add_argument("--streams", default="1,8,32,64", help="comma-separated stream counts")
    ap.add_argument("--turns", type=int, default=4, help="turns per session")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seconds", type=float, default=20, help="length of each phase")
    ap.add_argument("--warmup", type=float, default=2, help="excluded start of each phase")
    ap.add_argument("--long-frac", type=float, default=0.0, help="fraction of long user turns")
    ap.add_argument("--long-bytes", type=int, default=1500)
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat the sweep (interleaved); the table shows medians")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="also write every round's rows to this file")
    a = ap.parse_args(argv)
    if a.warmup >= a.seconds:
        ap.error("--warmup must be shorter than --seconds")
    streams = [int(x) for x in a.streams.split(",") if x.strip()]
    runs = []
    for rnd in range(a.rounds):
        rows = []
        for n in streams:
            opts = list(extra)
            if n > 64 and not any(o.startswith("--max-running") for o in extra):
                opts += ["--max-running", str(n)]  # every stream running (default 64)
            d = Daemon(a.xlserve, a.model, opts)
            try:
                r = asyncio.run(run_phase(d.port, d, a, n, rnd))
            finally:
                rc = d.stop()
            if rc not in (0, None):
                print("warning: daemon exited %s" % rc, file=sys.stderr)
            rows.append(r)
            print("round %d, %d streams: %.1f tokens/s, TTFT p99 %s ms, %d errors"
                  % (rnd, n, r["tok_s"], fmt_ms(r["ttft_p99"]).strip(), r["errors"]),
                  file=sys.stderr, flush=True)
        runs.append(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "daemon": extra, "rounds": runs}, f, indent=1)
    print_table(median_rows(runs) if len(runs) > 1 else runs[0], a, extra)
    return 1 if any(r["errors"] for run in runs for r in run) else 0


if __name__ == "__main__":
    sys.exit(main())

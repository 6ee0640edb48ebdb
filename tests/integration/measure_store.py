"""measure_store.py: the session store's figures in docs/performance.md (not a test, run
by hand).

  /usr/bin/python3 tests/integration/measure_store.py model DIR --preset medium|bench
      writes a random byte model: medium (4 layers, d 128, mem_len 128: 0.5 MiB state) or bench
      (6 layers, d 256, 8x32 heads, mem_len 256: 3 MiB state). docs/performance.md's
      numbers were taken on the bundled models/austen-byte instead (4 such layers: 2 MiB).
  /usr/bin/python3 tests/integration/measure_store.py turn MODEL [--turns N]
      turn latency by durability: off (no store), turn (fsync), turn with --no-store-fsync,
      async. All daemons run at once and get the same turns in rotation (the machine is
      shared: rotation spreads the noise evenly). Client-side latency of a non-streamed turn
      (16-byte prompt, 16 tokens), median and p90, and the store's commit time (server side).
  /usr/bin/python3 tests/integration/measure_store.py restore MODEL [--sessions N]
      restore latency: N sessions with full memories under a 1 MiB budget (every next turn
      brings its session back from the store) against the same with a store but all sessions
      in RAM, and without a store; client-side turn latency (1-byte prompt, 1 token) and the
      server's restore histogram.
  /usr/bin/python3 tests/integration/measure_store.py ram MODEL [--sessions N]
      RAM per session: VmRSS growth of a daemon holding N sessions with full memories, per
      session, against the state size (xlserve info / GET /v1/models).
  /usr/bin/python3 tests/integration/measure_store.py migrate MODEL [--sessions N]
      the store's schema migration (rows keyed by id alone -> by (API key, id)): N sessions
      with full memories are stored, the file is rewritten into the first schema (the same
      rows), and the daemon's start (process start to /health 200) is timed on that file (it
      migrates) against the same start on the migrated file; every session is then read back.
  /usr/bin/python3 tests/integration/measure_store.py deltas MODEL [--turns N] [--reps R]
      what a turn costs the store (snapshot + deltas): one session with a full memory per
      durability (off / turn / async; one daemon each, 1 worker, all at once, the same turns in
      rotation; after each turn of a store the next waits until the store's row has the turn's
      version, so async's commit never overlaps another daemon's turn), turns of a 10-token prompt + 4 tokens (word models: "w<i>" words; byte models:
      10 bytes). Per mode: client-side latency (median, p90, mean, max), and for the stores the
      bytes the daemon wrote (/proc/PID/io: write_bytes, what reached the block layer, WAL and
      checkpoints included; wchar, what it handed to write()) per turn against the bytes the
      turn's 14 positions add (n_layer x 2 x 14 x H*Dh x 4), the compactions seen (the row's
      snapshot version changing), and the store's size (sessions.db + WAL) after the turns.
      R reps restart everything (fresh stores) and report each rep. --one-at-a-time runs the
      modes one after another, one daemon alive at a time (no other daemon's store thread or
      compaction shares the machine with a turn; the order reverses every other rep), each
      getting the same fill and the same turns.
Env: XLSERVE_BIN (default build/xlserve), PYTHONPATH=tools.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xlharness as X  # noqa: E402

PRESETS = {
    "medium": dict(d_model=128, d_embed=128, n_head=4, d_head=32, d_inner=512, n_layer=4,
                   mem_len=128),
    "bench": dict(d_model=256, d_embed=256, n_head=8, d_head=32, d_inner=1024, n_layer=6,
                  mem_len=256),
}


def metrics(port):
    b = X.request(port, "GET", "/metrics")[2].decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S+) (\S+)$", b, re.M)}


def turn(port, sid, prompt, n):
    t0 = time.monotonic()
    st, _, b = X.post_json(port, "/v1/completions",
                           {"prompt": prompt, "max_tokens": n, "temperature": 0},
                           headers={"X-Session-Id": sid} if sid else {},
                           timeout=3600)  # a big model's full memory on a loaded machine
    dt = time.monotonic() - t0
    assert st == 200, b
    return dt


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def state_bytes(port):
    st, _, b = X.request(port, "GET", "/v1/models")
    return json.loads(b)["data"][0]["xlserve"]["state_bytes"]


def cmd_model(a):
    X.write_tiny_model(a.dir, **PRESETS[a.preset])
    print("wrote", a.dir)


def cmd_turn(a):
    tmp = tempfile.mkdtemp(prefix="xlstore-")
    modes = [("off", []),
             ("turn", ["--state-dir", tmp + "/t"]),
             ("turn, no fsync", ["--state-dir", tmp + "/n", "--no-store-fsync"]),
             ("async", ["--state-dir", tmp + "/a", "--durability", "async"])]
    ds = [(name, X.Daemon(a.model, args + ["--access-log", "false"])) for name, args in modes]
    try:
        sb = state_bytes(ds[0][1].port)
        lat = {name: [] for name, _ in ds}
        for name, d in ds:  # warm up, and fill the memory: saves of full states
            turn(d.port, "m", "x" * 400, 1)
        for i in range(a.turns):
            for name, d in (ds if i % 2 == 0 else ds[::-1]):
                lat[name].append(turn(d.port, "m", "%16d" % i, 16))
        base = statistics.median(lat["off"])
        print("state %d bytes (%.2f MiB); %d turns per mode (16-byte prompt, 16 tokens, "
              "non-streamed); load average at the end %s" % (
                  sb, sb / 2**20, a.turns, "%.1f %.1f %.1f" % os.getloadavg()))
        for name, d in ds:
            m = metrics(d.port)
            med = statistics.median(lat[name])
            line = "  %-15s median %6.2f ms  p90 %6.2f ms  (%+6.2f ms vs off)" % (
                name, med * 1e3, pct(lat[name], 0.9) * 1e3, (med - base) * 1e3)
            n = m.get("xlserve_store_write_seconds_count", 0)
            if n:
                line += "; commit mean %.2f ms over %d writes" % (
                    1e3 * m["xlserve_store_write_seconds_sum"] / n, n)
            print(line, flush=True)
    finally:
        for _, d in ds:
            d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def cmd_restore(a):
    tmp = tempfile.mkdtemp(prefix="xlstore-")
    ds = {"ram": X.Daemon(a.model, ["--access-log", "false"]),
          "store, all in RAM": X.Daemon(a.model, ["--state-dir", tmp + "/k", "--access-log",
                                                  "false"]),
          "store, evicted": X.Daemon(a.model, ["--state-dir", tmp + "/e", "--session-ram-mb",
                                               "1", "--access-log", "false"])}
    ev = ds["store, evicted"]
    try:
        sb = state_bytes(ev.port)
        for d in ds.values():
            for i in range(a.sessions):
                turn(d.port, "r%d" % i, "y" * 600, 1)  # memory full
        m0 = metrics(ev.port)
        lat = {name: [] for name in ds}
        order = list(ds.items())
        for i in range(a.sessions):
            for name, d in (order if i % 2 else order[::-1]):
                lat[name].append(turn(d.port, "r%d" % i, "z", 1))
        m = metrics(ev.port)
        n = m["xlserve_session_restore_seconds_count"] - m0["xlserve_session_restore_seconds_count"]
        s = m["xlserve_session_restore_seconds_sum"] - m0["xlserve_session_restore_seconds_sum"]
        rn = m["xlserve_store_read_seconds_count"] - m0["xlserve_store_read_seconds_count"]
        rs = m["xlserve_store_read_seconds_sum"] - m0["xlserve_store_read_seconds_sum"]
        print("state %d bytes (%.2f MiB); %d sessions, a turn each (1-byte prompt, 1 token); "
              "durability turn; evicted: a 1 MiB budget pushed every session out of RAM before "
              "its turn; load average at the end %s" % (
                  sb, sb / 2**20, a.sessions, "%.1f %.1f %.1f" % os.getloadavg()))
        for name in ds:
            print("  %-18s turn median %6.2f ms  p90 %6.2f ms" % (
                name, 1e3 * statistics.median(lat[name]), 1e3 * pct(lat[name], 0.9)))
        print("  restores %d: mean %.2f ms as the request saw it (queue + read + decode), "
              "store read+decode mean %.2f ms" % (n, 1e3 * s / max(n, 1), 1e3 * rs / max(rn, 1)))
        print("  turn latency added by a restore (median, evicted - all in RAM): %.2f ms" % (
            1e3 * (statistics.median(lat["store, evicted"]) -
                   statistics.median(lat["store, all in RAM"]))), flush=True)
    finally:
        for d in ds.values():
            d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])


def cmd_ram(a):
    d = X.Daemon(a.model, ["--access-log", "false", "--session-ram-mb", "100000"])
    try:
        sb = state_bytes(d.port)
        turn(d.port, None, "w" * 600, 1)  # workspaces
        time.sleep(0.2)
        r0 = rss_kb(d.proc.pid)
        for i in range(a.sessions):
            turn(d.port, "q%d" % i, "v" * 600, 1)  # memory full: every page of the state used
        time.sleep(0.2)
        r1 = rss_kb(d.proc.pid)
        m = metrics(d.port)
        per = (r1 - r0) * 1024 / a.sessions
        acc = m["xlserve_session_ram_bytes"] / m["xlserve_sessions_in_ram"]
        print("state %d bytes; %d sessions with full memories: RSS +%.1f MiB, %.0f bytes per "
              "session = %.3f x the state size; the table accounts %.0f bytes per session "
              "(%.4f x)" % (sb, a.sessions, (r1 - r0) / 1024, per, per / sb, acc, acc / sb))
    finally:
        d.stop()


V1_SCHEMA = (
    "PRAGMA page_size=65536; PRAGMA journal_mode=WAL;"
    "CREATE TABLE sessions (id TEXT PRIMARY KEY NOT NULL, owner BLOB NOT NULL, fingerprint "
    "INTEGER NOT NULL, created REAL NOT NULL, last_used REAL NOT NULL, tokens INTEGER NOT NULL, "
    "turns INTEGER NOT NULL, mode INTEGER NOT NULL, messages INTEGER NOT NULL, positions INTEGER "
    "NOT NULL, meta BLOB NOT NULL, state BLOB NOT NULL);"
    "CREATE INDEX sessions_by_owner ON sessions (owner, last_used);"
    "CREATE INDEX sessions_by_last_used ON sessions (last_used);"
    "PRAGMA user_version = 1;")
V1_COLS = ("id, owner, fingerprint, created, last_used, tokens, turns, mode, messages, positions, "
           "meta, state")


def cmd_migrate(a):
    import sqlite3
    tmp = tempfile.mkdtemp(prefix="xlstore-")
    sd = os.path.join(tmp, "state")
    args = ["--access-log", "false", "--state-dir", sd]
    try:
        d = X.Daemon(a.model, args)
        try:
            for i in range(a.sessions):
                turn(d.port, "g%d" % i, "v" * 600, 1)  # memory full
        finally:
            d.stop()
        path = os.path.join(sd, "sessions.db")
        db = sqlite3.connect(path)
        rows = []  # one turn each: a snapshot (its pieces: the meta, then the state), no delta
        for r in db.execute("SELECT %s, snap_id FROM sessions" % V1_COLS.replace(
                ", meta, state", "")).fetchall():
            ps = [b for _, b in db.execute(
                "SELECT part, bytes FROM snap_pieces WHERE owner = ? AND id = ? AND snap_id = ? "
                "ORDER BY part", (r[1], r[0], r[-1]))]
            rows.append(tuple(r[:-1]) + (ps[0], b"".join(ps[1:])))
        db.close()
        nbytes = sum(len(r[10]) + len(r[11]) for r in rows)
        for f in os.listdir(sd):
            if f.startswith("sessions.db"):
                os.unlink(os.path.join(sd, f))
        db = sqlite3.connect(path)
        db.executescript(V1_SCHEMA)
        db.executemany("INSERT INTO sessions (%s) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)" % V1_COLS,
                       rows)
        db.commit()
        db.close()
        times = []
        for _ in range(2):  # the first start migrates, the second opens the migrated file
            t0 = time.monotonic()
            d = X.Daemon(a.model, args, timeout=600)
            times.append(time.monotonic() - t0)
            try:
                if len(times) == 2:
                    for i in range(a.sessions):
                        st, s = X.get_session(d.port, "g%d" % i)
                        assert st == 200 and s["tokens"] == 601, s
            finally:
                d.stop()
        db = sqlite3.connect(path)
        assert db.execute("PRAGMA user_version").fetchone()[0] == 5
        db.close()
        print("%d sessions, %.1f MiB of envelopes: start with the migration %.3f s, start of the "
              "migrated file %.3f s (+%.3f s: %.1f MiB/s); every session read back" % (
                  len(rows), nbytes / 2**20, times[0], times[1], times[0] - times[1],
                  nbytes / 2**20 / max(times[0] - times[1], 1e-9)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def model_shape(path):
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    return cfg


def proc_io(pid):
    with open("/proc/%d/io" % pid) as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f)}


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)
               if f.startswith("sessions.db"))


def file_mib(d, name):
    p = os.path.join(d, name)
    return os.path.getsize(p) / 2**20 if os.path.exists(p) else 0.0


def store_row(sd):
    import sqlite3
    db = sqlite3.connect("file:%s/sessions.db?mode=ro" % sd, uri=True)
    row = db.execute("SELECT seq, snap_seq, snap_bytes, n_deltas, delta_bytes FROM "
                     "sessions").fetchone()
    db.close()
    return row


def report_mode(name, d, xs, lat_off, run):
    """Prints one mode's lines: latency against off, and for a store the bytes written, the
    compactions seen, the store's size and the swaps (run: turns, pos_bytes, sb, io0, io1,
    trail, sd)."""
    base = statistics.median(lat_off)
    med = statistics.median(xs)
    print("  %-6s median %8.1f ms  p90 %8.1f  mean %8.1f  max %8.1f  (median "
          "%+6.1f%% vs off, mean %+6.1f%%)" % (
              name, med * 1e3, pct(xs, 0.9) * 1e3, statistics.mean(xs) * 1e3,
              max(xs) * 1e3, 100 * (med / base - 1),
              100 * (statistics.mean(xs) / statistics.mean(lat_off) - 1)), flush=True)
    m0, m = run["m0"], run["m1"]

    def grew(key):
        return m.get(key, 0) - m0.get(key, 0)
    # server side, per turn: the request's time less its forward passes' (the CPU-bound part
    # a shared machine's load stretches): parsing, queueing, encoding, the commit, the reply
    req = grew("xlserve_request_duration_seconds_sum") / run["turns"]
    fwd = grew("xlserve_forward_seconds_sum") / run["turns"]
    print("         server side per turn: request %.1f ms = forward passes %.1f ms + the rest "
          "%.1f ms" % (1e3 * req, 1e3 * fwd, 1e3 * (req - fwd)), flush=True)
    if name == "off":
        return
    turns, pos_bytes, sb, sd = run["turns"], run["pos_bytes"], run["sb"], run["sd"]
    wb = (run["io1"]["write_bytes"] - run["io0"]["write_bytes"]) / turns
    wc = (run["io1"]["wchar"] - run["io0"]["wchar"]) / turns
    row = store_row(sd)
    tr = run["trail"]
    print("         written per turn: write_bytes %.2f MiB (%.2f x the positions), "
          "wchar %.2f MiB (%.2f x); compactions seen %d; store after %d turns: "
          "%.1f MiB (%.2f x the state: sessions.db %.1f MiB + WAL %.1f MiB; row: "
          "snapshot %.1f MiB + %d deltas %.1f MiB)" % (
              wb / 2**20, wb / pos_bytes, wc / 2**20, wc / pos_bytes,
              len(set(v for v, _ in tr if v >= 0)) - 1, turns + 2, dir_bytes(sd) / 2**20,
              dir_bytes(sd) / sb, file_mib(sd, "sessions.db"),
              file_mib(sd, "sessions.db-wal"), row[2] / 2**20, row[3], row[4] / 2**20),
          flush=True)
    # whole compaction cycles: from the turn that first saw one swap to the turn that first
    # saw a later one (the deltas, the compaction and the checkpoints of one or more cycles)
    seen = [j for j in range(1, len(tr)) if tr[j][0] != tr[j - 1][0] and tr[j - 1][0] >= 0]
    if len(seen) >= 2:
        j0, j1 = seen[0], seen[-1]
        cyc = (tr[j1][1] - tr[j0][1]) / (j1 - j0)
        print("         whole compaction cycles (turns %d..%d, %d swaps): write_bytes "
              "%.2f MiB per turn (%.2f x the positions)" % (
                  j0 + 1, j1 + 1, len(seen) - 1, cyc / 2**20, cyc / pos_bytes))
    k = "xlserve_store_write_seconds_"
    n_w = m.get(k + "count", 0) - m0.get(k + "count", 0)
    if n_w:
        print("         commits (server side, begin to fsync'd commit): %d, mean %.1f ms "
              "(%.1f%% of off's median turn)" % (
                  n_w, 1e3 * (m[k + "sum"] - m0.get(k + "sum", 0)) / n_w,
                  100 * (m[k + "sum"] - m0.get(k + "sum", 0)) / n_w / base), flush=True)
    n = m.get("xlserve_store_swap_seconds_count", 0)
    if n:
        bounds = sorted((float(k.split('le="')[1].rstrip('"}')), v)
                        for k, v in m.items()
                        if k.startswith("xlserve_store_swap_seconds_bucket") and "+Inf" not in k)
        worst = next((b for b, v in bounds if v >= n), float("inf"))
        print("         swaps %d: mean %.1f ms, all within %g s (histogram bucket)" % (
            n, 1e3 * m["xlserve_store_swap_seconds_sum"] / n, worst), flush=True)


def cmd_deltas(a):
    cfg = model_shape(a.model)
    words = cfg.get("xlserve_tokenizer") == "words"
    M = cfg["mem_len"]
    pos_bytes = cfg["n_layer"] * 2 * 14 * cfg["n_head"] * cfg["d_head"] * 4

    def prompts(n_turns):
        r = __import__("random").Random(5)

        def one(n):
            if words:
                return " " + " ".join("w%d" % r.randrange(1000, 19000) for _ in range(n))
            return "".join(r.choice("abcdefgh ") for _ in range(n))
        return one(M + 8), [one(10) for _ in range(n_turns + 1)]

    common = ["--access-log", "false", "--workers", "1", "--request-timeout", "3600",
              "--max-tokens-limit", "100000"]
    for rep_i in range(a.reps):
        tmp = tempfile.mkdtemp(prefix="xlstore-", dir=a.tmp)
        modes = [("off", [], None), ("turn", ["--state-dir", tmp + "/t"], tmp + "/t"),
                 ("async", ["--state-dir", tmp + "/a", "--durability", "async"], tmp + "/a")]
        if a.one_at_a_time and rep_i % 2 == 1:
            modes = modes[::-1]  # drift over the run falls on every mode alike
        fill, short = prompts(a.turns)
        runs = {name: dict(lat=[], trail=[], sd=sd, turns=a.turns, pos_bytes=pos_bytes)
                for name, _, sd in modes}
        live = []

        def start(name, args):
            d = X.Daemon(a.model, common + args, timeout=600)
            live.append((name, d))
            t0 = time.monotonic()
            turn(d.port, "m", fill, 1)  # the memory full (the first turn: a whole snapshot)
            runs[name]["t_fill"] = time.monotonic() - t0
            turn(d.port, "m", short[0], 4)  # a first short turn (workspaces at this shape)
            runs[name]["sb"] = state_bytes(d.port)
            if runs[name]["sd"]:
                runs[name]["seq"] = 2  # the fill and the first short turn
                committed(name, 2)
            runs[name]["io0"] = proc_io(d.proc.pid)
            runs[name]["m0"] = metrics(d.port)
            return d

        def committed(name, want, limit=60.0):
            """The row's version once it reached want (async: its commit lands after the
            response; in rotation the next daemon's turn waits for it, so no daemon's turn
            shares the machine with another daemon's commit)."""
            t_end = time.monotonic() + limit
            while True:
                row = store_row(runs[name]["sd"])
                if row and row[0] >= want or time.monotonic() > t_end:
                    return row
                time.sleep(0.002)

        def one_turn(name, d, p):
            runs[name]["lat"].append(turn(d.port, "m", p, 4))
            if runs[name]["sd"]:
                runs[name]["seq"] += 1
                row = committed(name, runs[name]["seq"])
                runs[name]["trail"].append((row[1] if row else -1,
                                            proc_io(d.proc.pid)["write_bytes"]))

        def finish(name, d):
            time.sleep(1.5)  # async: its last commit
            runs[name]["io1"] = proc_io(d.proc.pid)
            runs[name]["m1"] = metrics(d.port)

        try:
            load0 = "%.1f %.1f %.1f" % os.getloadavg()
            if a.one_at_a_time:  # one daemon alive at a time: no other daemon's store work
                for name, args, _ in modes:
                    d = start(name, args)
                    for i in range(a.turns):
                        one_turn(name, d, short[i + 1])
                    finish(name, d)
                    report_mode(name, d, runs[name]["lat"], runs["off"]["lat"] or
                                runs[name]["lat"], runs[name])
                    d.stop()
                    live.remove((name, d))
            else:  # all at once, the same turns in rotation
                ds = [(name, start(name, args)) for name, args, _ in modes]
                for i in range(a.turns):
                    for name, d in (ds if i % 2 == 0 else ds[::-1]):
                        one_turn(name, d, short[i + 1])
                for name, d in ds:
                    finish(name, d)
            sb = runs[modes[0][0]]["sb"]
            print("rep %d (%s): state %d bytes (%.1f MiB), memory filled with %d tokens (%.1f s); "
                  "%d turns per mode (10-token prompt + 4 tokens, non-streamed, 1 worker); a "
                  "turn's 14 positions: %d bytes (%.2f MiB); load average at the start %s, at "
                  "the end %s" % (
                      rep_i + 1, "one daemon at a time, in the order " +
                      " ".join(n for n, _, _ in modes) if a.one_at_a_time else
                      "all daemons at once", sb, sb / 2**20, M + 8,
                      statistics.mean(r["t_fill"] for r in runs.values()), a.turns, pos_bytes,
                      pos_bytes / 2**20, load0, "%.1f %.1f %.1f" % os.getloadavg()), flush=True)
            for name, _, _ in modes:
                if a.one_at_a_time and name != "off":
                    # reprinted against off now that every mode has run
                    print("  %-6s median %+6.1f%% vs off (%.1f vs %.1f ms)" % (
                        name, 100 * (statistics.median(runs[name]["lat"]) /
                                     statistics.median(runs["off"]["lat"]) - 1),
                        1e3 * statistics.median(runs[name]["lat"]),
                        1e3 * statistics.median(runs["off"]["lat"])))
                elif not a.one_at_a_time:
                    report_mode(name, dict(live)[name], runs[name]["lat"], runs["off"]["lat"],
                                runs[name])
        finally:
            for _, d in live:
                d.stop()
            shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("model")
    s.add_argument("dir")
    s.add_argument("--preset", choices=sorted(PRESETS), default="medium")
    s = sub.add_parser("turn")
    s.add_argument("model")
    s.add_argument("--turns", type=int, default=200)
    s = sub.add_parser("restore")
    s.add_argument("model")
    s.add_argument("--sessions", type=int, default=100)
    s = sub.add_parser("ram")
    s.add_argument("model")
    s.add_argument("--sessions", type=int, default=200)
    s = sub.add_parser("migrate")
    s.add_argument("model")
    s.add_argument("--sessions", type=int, default=100)
    s = sub.add_parser("deltas")
    s.add_argument("model")
    s.add_argument("--turns", type=int, default=150)
    s.add_argument("--reps", type=int, default=1)
    s.add_argument("--one-at-a-time", action="store_true",
                   help="one daemon alive at a time (off, turn, async; reversed every other rep)")
    s.add_argument("--tmp", default=None, help="where the stores go (default: $TMPDIR)")
    a = ap.parse_args()
    {"model": cmd_model, "turn": cmd_turn, "restore": cmd_restore, "ram": cmd_ram,
     "migrate": cmd_migrate, "deltas": cmd_deltas}[a.cmd](a)


if __name__ == "__main__":
    main()

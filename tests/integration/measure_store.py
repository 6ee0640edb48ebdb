"""measure_store.py: the session store's figures in server/README-server.md (not a test, run
by hand).

  /usr/bin/python3 tests/integration/measure_store.py model DIR --preset medium|bench
      writes a random byte model: medium (4 layers, d 128, mem_len 128: 0.5 MiB state) or bench
      (6 layers, d 256, 8x32 heads, mem_len 256: 3 MiB state). server/README-server.md's
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
      rotation), turns of a 10-token prompt + 4 tokens (word models: "w<i>" words; byte models:
      10 bytes). Per mode: client-side latency (median, p90, mean, max), and for the stores the
      bytes the daemon wrote (/proc/PID/io: write_bytes, what reached the block layer, WAL and
      checkpoints included; wchar, what it handed to write()) per turn against the bytes the
      turn's 14 positions add (n_layer x 2 x 14 x H*Dh x 4), the compactions seen (the row's
      snapshot version changing), and the store's size (sessions.db + WAL) after the turns.
      R reps restart everything (fresh stores) and report each rep.
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
        assert db.execute("PRAGMA user_version").fetchone()[0] == 4
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


def cmd_deltas(a):
    import sqlite3
    cfg = model_shape(a.model)
    words = cfg.get("xlserve_tokenizer") == "words"
    M = cfg["mem_len"]
    pos_bytes = cfg["n_layer"] * 2 * 14 * cfg["n_head"] * cfg["d_head"] * 4
    r = __import__("random").Random(5)

    def prompt(n):
        if words:
            return " " + " ".join("w%d" % r.randrange(1000, 19000) for _ in range(n))
        return "".join(r.choice("abcdefgh ") for _ in range(n))

    for rep_i in range(a.reps):
        tmp = tempfile.mkdtemp(prefix="xlstore-", dir=a.tmp)
        common = ["--access-log", "false", "--workers", "1", "--request-timeout", "3600",
                  "--max-tokens-limit", "100000"]
        modes = [("off", []), ("turn", ["--state-dir", tmp + "/t"]),
                 ("async", ["--state-dir", tmp + "/a", "--durability", "async"])]
        ds = []
        try:
            for name, args in modes:
                ds.append((name, X.Daemon(a.model, common + args, timeout=600)))
            sb = state_bytes(ds[0][1].port)
            t0 = time.monotonic()
            fill = prompt(M + 8)
            for name, d in ds:  # the memory full (the first turn: a whole snapshot)
                turn(d.port, "m", fill, 1)
            t_fill = (time.monotonic() - t0) / len(ds)
            for name, d in ds:  # a first short turn each (workspaces at this shape)
                turn(d.port, "m", prompt(10), 4)
            io0 = {name: proc_io(d.proc.pid) for name, d in ds}
            load0 = "%.1f %.1f %.1f" % os.getloadavg()
            lat = {name: [] for name, _ in ds}
            snaps = {name: set() for name, _ in ds}
            trail = {name: [] for name, _ in ds}  # per turn: (snap_seq, write_bytes) after it
            for i in range(a.turns):
                p = prompt(10)
                for name, d in (ds if i % 2 == 0 else ds[::-1]):
                    lat[name].append(turn(d.port, "m", p, 4))
                    if name != "off":
                        db = sqlite3.connect("file:%s/%s/sessions.db?mode=ro" % (
                            tmp, "t" if name == "turn" else "a"), uri=True)
                        v = db.execute("SELECT snap_seq FROM sessions").fetchone()[0]
                        db.close()
                        snaps[name].add(v)
                        trail[name].append((v, proc_io(d.proc.pid)["write_bytes"]))
            time.sleep(1.5)  # async: its last commit
            io1 = {name: proc_io(d.proc.pid) for name, d in ds}
            base = statistics.median(lat["off"])
            print("rep %d: state %d bytes (%.1f MiB), memory filled with %d tokens (%.1f s per "
                  "daemon); %d turns per mode (10-token prompt + 4 tokens, non-streamed, "
                  "1 worker); a turn's 14 positions: %d bytes (%.2f MiB); load average at "
                  "the start %s, at the end %s" % (
                      rep_i + 1, sb, sb / 2**20, M + 8, t_fill, a.turns, pos_bytes,
                      pos_bytes / 2**20, load0, "%.1f %.1f %.1f" % os.getloadavg()))
            for name, d in ds:
                xs = lat[name]
                med = statistics.median(xs)
                line = ("  %-6s median %8.1f ms  p90 %8.1f  mean %8.1f  max %8.1f  (median "
                        "%+6.1f%% vs off, mean %+6.1f%%)" % (
                            name, med * 1e3, pct(xs, 0.9) * 1e3, statistics.mean(xs) * 1e3,
                            max(xs) * 1e3, 100 * (med / base - 1),
                            100 * (statistics.mean(xs) / statistics.mean(lat["off"]) - 1)))
                print(line)
                if name == "off":
                    continue
                wb = (io1[name]["write_bytes"] - io0[name]["write_bytes"]) / a.turns
                wc = (io1[name]["wchar"] - io0[name]["wchar"]) / a.turns
                sd = os.path.join(tmp, "t" if name == "turn" else "a")
                db = sqlite3.connect("file:%s/sessions.db?mode=ro" % sd, uri=True)
                row = db.execute("SELECT seq, snap_seq, snap_bytes, n_deltas, delta_bytes FROM "
                                 "sessions").fetchone()
                db.close()
                print("         written per turn: write_bytes %.2f MiB (%.2f x the positions), "
                      "wchar %.2f MiB (%.2f x); compactions seen %d; store after %d turns: "
                      "%.1f MiB (%.2f x the state: sessions.db %.1f MiB + WAL %.1f MiB; row: "
                      "snapshot %.1f MiB + %d deltas %.1f MiB)" % (
                          wb / 2**20, wb / pos_bytes, wc / 2**20, wc / pos_bytes,
                          len(snaps[name]) - 1, a.turns + 2, dir_bytes(sd) / 2**20,
                          dir_bytes(sd) / sb, file_mib(sd, "sessions.db"),
                          file_mib(sd, "sessions.db-wal"), row[2] / 2**20, row[3],
                          row[4] / 2**20),
                      flush=True)
                # whole compaction cycles: from the turn that first saw one swap to the turn
                # that first saw a later one (the deltas, the compaction and the checkpoints
                # of one or more full cycles)
                tr = trail[name]
                seen = [j for j in range(1, len(tr)) if tr[j][0] != tr[j - 1][0]]
                if len(seen) >= 2:
                    j0, j1 = seen[0], seen[-1]
                    cyc = (tr[j1][1] - tr[j0][1]) / (j1 - j0)
                    print("         whole compaction cycles (turns %d..%d, %d swaps): write_bytes "
                          "%.2f MiB per turn (%.2f x the positions)" % (
                              j0 + 1, j1 + 1, len(seen) - 1, cyc / 2**20, cyc / pos_bytes))
                m = metrics(d.port)
                n = m.get("xlserve_store_swap_seconds_count", 0)
                if n:
                    bounds = sorted((float(k.split('le="')[1].rstrip('"}')), v)
                                    for k, v in m.items()
                                    if k.startswith("xlserve_store_swap_seconds_bucket")
                                    and "+Inf" not in k)
                    worst = next((b for b, v in bounds if v >= n), float("inf"))
                    print("         swaps %d: mean %.1f ms, all within %g s (histogram bucket)" % (
                        n, 1e3 * m["xlserve_store_swap_seconds_sum"] / n, worst))
        finally:
            for _, d in ds:
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
    s.add_argument("--tmp", default=None, help="where the stores go (default: $TMPDIR)")
    a = ap.parse_args()
    {"model": cmd_model, "turn": cmd_turn, "restore": cmd_restore, "ram": cmd_ram,
     "migrate": cmd_migrate, "deltas": cmd_deltas}[a.cmd](a)


if __name__ == "__main__":
    main()

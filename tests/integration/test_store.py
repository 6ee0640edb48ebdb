"""The durable session store: a conversation survives SIGTERM + restart and kill -9
under load (every acknowledged turn, nothing half-written), sessions beyond the RAM budget come
back from the store exactly as they left (and RSS stays bounded), corrupted rows are refused
with 409 session_incompatible and kept, sessions move between daemons (GET/PUT state), a turn
is committed before its response completes, async commits within their delay, TTL deletes rows,
state blobs with a token counter that does not match their ring or non-finite keys/values are
refused.
The SQLite file is read and damaged with Python's sqlite3 module."""
import http.client
import json
import os
import random
import select
import signal
import socket
import sqlite3
import subprocess
import struct
import threading
import time

import pytest

import xlharness as X
from redisserver import NOT_INSTALLED, REDIS, RedisServer, redis_command

MASK = (1 << 64) - 1


def fnv(data, h=0xcbf29ce484222325):
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & MASK
    return h


def digest(ids):
    """The session's transcript digest: FNV-1a 64 over the fed token ids (int32 LE)."""
    return "%016x" % fnv(struct.pack("<%di" % len(ids), *ids))


def comp(port, sid, prompt, n, timeout=60, **kw):
    body = dict(prompt=prompt, max_tokens=n, temperature=0, logprobs=0, **kw)
    st, h, b = X.post_json(port, "/v1/completions", body,
                           headers={"X-Session-Id": sid} if sid else {}, timeout=timeout)
    return st, b


def ok(port, sid, prompt, n, **kw):
    return X.complete(port, sid, prompt=prompt, max_tokens=n, temperature=0, logprobs=0, **kw)


def gen(b):
    return X.ids_of(b["choices"][0]["logprobs"]["tokens"])


def snapshot(db, owner, sid, snap_id):
    """A row's snapshot (meta, state) from its pieces: piece 0 the meta, then the state's."""
    ps = [b for _, b in db.execute("SELECT part, bytes FROM snap_pieces WHERE owner = ? AND "
                                   "id = ? AND snap_id = ? ORDER BY part", (owner, sid, snap_id))]
    return (ps[0] if ps else b""), b"".join(ps[1:])


def set_piece(db, sid, part, data):
    """Replaces piece `part` of session sid's snapshot (the one its row points at)."""
    db.execute("UPDATE snap_pieces SET bytes = ? WHERE id = ? AND part = ? AND snap_id = (SELECT "
               "snap_id FROM sessions s WHERE s.id = snap_pieces.id)", (data, sid, part))


def piece(db, sid, part):
    return db.execute("SELECT bytes FROM snap_pieces WHERE id = ? AND part = ? AND snap_id = "
                      "(SELECT snap_id FROM sessions s WHERE s.id = snap_pieces.id)",
                      (sid, part)).fetchone()[0]


def rows(state_dir, check=True):
    """id -> (tokens, snapshot meta, snapshot state, [(seq, meta, delta)]); check: the log's
    versions too (the deltas run from the snapshot's version to the row's, no gap)."""
    db = sqlite3.connect(os.path.join(str(state_dir), "sessions.db"))
    try:
        out = {}
        for sid, owner, tokens, seq, snap_seq, snap_id in db.execute(
                "SELECT id, owner, tokens, seq, snap_seq, snap_id FROM sessions"):
            meta, state = snapshot(db, owner, sid, snap_id)
            ds = db.execute("SELECT seq, meta, delta FROM deltas WHERE owner = ? AND id = ? "
                            "AND seq > ? ORDER BY seq", (owner, sid, snap_seq)).fetchall()
            assert not check or [d[0] for d in ds] == list(range(snap_seq + 1, seq + 1)), \
                (sid, snap_seq, seq)
            out[sid] = (tokens, meta, state, ds)
        return out
    finally:
        db.close()


def log_valid(meta, state, deltas):
    """A snapshot and its deltas as the server's loader checks them, done independently: every
    record's checksums, the core blobs' kinds, and each delta continuing the counter before it."""
    if not envelope_valid(meta, state):
        return False
    fed = struct.unpack_from("<Q", state, 40)[0]
    for _, m, d in deltas:
        if not envelope_valid(m, d, b"XLDELTA\0"):
            return False
        frm, to = struct.unpack_from("<QQ", d, 40)
        if frm != fed or to <= frm:
            return False
        fed = to
    return True


def envelope_valid(meta, state, magic=b"XLSTATE\0"):
    """The session envelope's own checks, done independently of the server (a delta's record
    names its delta the same way)."""
    if meta[:8] != b"XLSESS\0\0" or len(meta) < 136:
        return False
    n_msgs, tail = struct.unpack_from("<II", meta, 104)
    core_len, core_sum = struct.unpack_from("<QQ", meta, 112)
    end = 128 + 9 * n_msgs + tail
    return (len(meta) == end + 8 and struct.unpack_from("<Q", meta, end)[0] == fnv(meta[:end])
            and core_len == len(state) and state[-8:] == struct.pack("<Q", core_sum)
            and state[:8] == magic)


K1, K2 = 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F
STATE_SEED = 0x626c6f6273756d31


def _mix64(x):
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & MASK
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & MASK
    return x ^ (x >> 33)


def xl_hash64(data, seed):
    """The core's blob checksum (core/hash.c), to re-sign edited state blobs."""
    n = len(data)
    h = [seed ^ K1, seed ^ K2, ~seed & MASK, (seed + n) & MASK]
    i = 0
    while i + 32 <= n:
        w = struct.unpack_from("<4Q", data, i)
        for k in range(4):
            h[k] = ((h[k] ^ ((w[k] * K2) & MASK)) * K1) & MASK
            h[k] ^= h[k] >> 29
        i += 32
    x = _mix64(h[0]) ^ _mix64((h[1] + K1) & MASK) ^ _mix64((h[2] + K2) & MASK) ^ _mix64(h[3])
    while i + 8 <= n:
        x = (_mix64(x ^ struct.unpack_from("<Q", data, i)[0]) * K1) & MASK
        i += 8
    tail = int.from_bytes(data[i:] + b"\0" * 8, "little") & MASK if i < n else 0
    return _mix64(x ^ tail ^ n)


def edit_envelope(env, edit):
    """An exported envelope with its state blob edited by edit(bytearray), the record's token
    count made to agree with the state's counter (fed + the pending token, modulo 2^64) and
    every checksum made right again (the state's, the record's copy of it, the record's own):
    only the state's own semantic checks can refuse it."""
    n_msgs, tail = struct.unpack_from("<II", env, 104)
    ml = 128 + 9 * n_msgs + tail + 8
    meta, state = bytearray(env[:ml]), bytearray(env[ml:])
    edit(state)
    pending = struct.unpack_from("<i", meta, 64)[0]
    fed = struct.unpack_from("<Q", state, 40)[0]
    struct.pack_into("<Q", meta, 56, (fed + (pending >= 0)) & MASK)
    struct.pack_into("<Q", state, len(state) - 8, xl_hash64(bytes(state[:-8]), STATE_SEED))
    meta[120:128] = state[-8:]
    struct.pack_into("<Q", meta, ml - 8, fnv(bytes(meta[:-8])))
    return bytes(meta), bytes(state)


def store_args(sd, *more):
    return ["--state-dir", str(sd), *more]


def continues_like_replay(port, sid, transcript, q=" next", n=8, tol=1e-4):
    """A turn of the session equals a stateless replay of its whole transcript (to tol: the
    replay feeds the transcript in other chunks, and past mem_len a position's context depends
    on its chunk). Greedy decoding may part at a near-tie: where the two choose different
    tokens, the session's choice must be the replay's runner-up within tol of its best, and
    the comparison ends there (their contexts differ from that token on)."""
    b = X.complete(port, sid, prompt=q, max_tokens=n, temperature=0, logprobs=0)
    ref = X.complete(port, None, prompt=transcript + list(q.encode()), max_tokens=n,
                     temperature=0, logprobs=2)
    got, want = b["choices"][0]["logprobs"], ref["choices"][0]["logprobs"]
    assert len(got["tokens"]) == len(want["tokens"]), (got["tokens"], want["tokens"])
    for i, (tok, ref_tok) in enumerate(zip(got["tokens"], want["tokens"])):
        if tok != ref_tok:
            runner_up = want["top_logprobs"][i]
            assert tok in runner_up, (i, tok, ref_tok, runner_up)
            assert abs(runner_up[tok] - want["token_logprobs"][i]) < 2 * tol, (i, runner_up)
            break
        assert abs(got["token_logprobs"][i] - want["token_logprobs"][i]) < tol, i
    return transcript + list(q.encode()) + gen(b)


def test_restart_continues_exactly(start_daemon, tiny_model, tmp_path):
    """A conversation (raw and chat), SIGTERM, restart: the next turn's log-probs equal those of
    a daemon that never restarted (bit for bit: the blob restores the memory's ring slots)."""
    sd = tmp_path / "state"
    d = start_daemon(tiny_model, *store_args(sd))
    ref = start_daemon(tiny_model)
    p1 = "It is a truth universally acknowledged, that a single man in possession"
    for port in (d.port, ref.port):
        ok(port, "r1", p1, 40)
        ok(port, "r1", " of a good fortune", 30)
    sys_m = {"role": "system", "content": "Be brief."}
    u1 = {"role": "user", "content": "Hello"}
    msgs = {}
    for port in (d.port, ref.port):
        st, h, b = X.post_json(port, "/v1/chat/completions",
                               {"messages": [sys_m, u1], "max_tokens": 12, "temperature": 0},
                               headers={"X-Session-Id": "c1"})
        assert st == 200
        msgs[port] = b["choices"][0]["message"]["content"]
    assert msgs[d.port] == msgs[ref.port]
    st, before = X.get_session(d.port, "r1")
    d.signal(signal.SIGTERM)
    assert d.wait_exit(30) == 0, d.tail()
    d2 = start_daemon(tiny_model, *store_args(sd))
    # found on first use, nothing loaded eagerly
    assert d2.wait_log(lambda o: o.get("event") == "store")["msg"].endswith("2 sessions stored")
    st, _, b = X.request(d2.port, "GET", "/v1/sessions")
    listed = {s["id"]: s for s in json.loads(b)["data"]}
    assert set(listed) == {"r1", "c1"} and not listed["r1"]["in_ram"]
    assert listed["r1"]["tokens"] == before["tokens"]
    a = ok(d2.port, "r1", " must be in want of a wife.", 40)
    r = ok(ref.port, "r1", " must be in want of a wife.", 40)
    assert a["choices"][0]["text"] == r["choices"][0]["text"] and X.lps(a) == X.lps(r)
    assert a["xlserve"]["session_tokens"] == r["xlserve"]["session_tokens"]
    st, s = X.get_session(d2.port, "r1")
    assert s["in_ram"] and s["turns"] == 3 and s["mode"] == "raw"
    # the chat record survived too: a full-history request is recognised, not replayed
    full = [sys_m, u1, {"role": "assistant", "content": msgs[ref.port]},
            {"role": "user", "content": "And you?"}]
    outs = []
    for port in (d2.port, ref.port):
        st, h, b = X.post_json(port, "/v1/chat/completions",
                               {"messages": full, "max_tokens": 12, "temperature": 0,
                                "logprobs": True}, headers={"X-Session-Id": "c1"})
        assert st == 200 and b["xlserve"]["history"] == "full_history", b
        outs.append(b)
    assert outs[0]["choices"][0]["message"] == outs[1]["choices"][0]["message"]
    assert outs[0]["choices"][0]["logprobs"] == outs[1]["choices"][0]["logprobs"]
    m = X.metrics(d2.port)
    assert m["xlserve_sessions_restored_total"] == 2 and m["xlserve_sessions_in_store"] == 2


def test_kill9_under_load_loses_no_acknowledged_turn(tiny_model, tmp_path):
    """Concurrent multi-turn sessions, kill -9 at random moments, restart: every turn whose
    response completed is there and continues exactly; a turn cut by the kill is there whole or
    not at all (the transcript digest tells which); every stored snapshot and delta validates.
    The tiny model's state (32 KiB) is outgrown by its deltas every few turns: compactions run
    throughout (checked: snapshots newer than the first turn's)."""
    kill9_rounds(tiny_model, tmp_path, n_sessions=10, rounds=3, seed=6, tol=1e-4)


def test_kill9_with_compactions_in_flight(medium_model, tmp_path):
    """The same at a shape whose compaction takes visible time (0.5 MiB states, a compaction
    every few turns of each session): kills land in compactions too; nothing acknowledged is
    lost and every row rebuilds."""
    kill9_rounds(medium_model, tmp_path, n_sessions=4, rounds=4, seed=11, tol=1e-3)


def test_restarts_kills_and_compactions_continue_bit_for_bit(medium_model, tmp_path):
    """A session served by a daemon with a store that is stopped or killed every 12 turns
    (its deltas compacted every few turns) gives, turn after turn, exactly the log-probs of the
    same turns on a daemon that never stopped (RAM only)."""
    sd = tmp_path / "state"
    r = random.Random(3)
    ref = X.Daemon(medium_model, ["--access-log", "false"])
    try:
        worst = 0.0
        for round_i in range(6):
            d = X.Daemon(medium_model, store_args(sd, "--access-log", "false"))
            try:
                for _ in range(12):
                    p = list(("".join(r.choice("abcdefgh ")
                                      for _ in range(r.randint(3, 20)))).encode())
                    n = r.randint(3, 20)
                    a, b = ok(d.port, "s", p, n), ok(ref.port, "s", p, n)
                    assert gen(a) == gen(b)
                    worst = max([worst] + [abs(x - y) for x, y in zip(X.lps(a), X.lps(b))])
            finally:
                if round_i % 2:
                    d.proc.kill()
                    d.proc.wait()
                else:
                    assert d.stop() == 0, d.tail()
        assert worst == 0.0
    finally:
        ref.stop()
    db = sqlite3.connect(os.path.join(str(sd), "sessions.db"))
    seq, snap_seq = db.execute("SELECT seq, snap_seq FROM sessions WHERE id = 's'").fetchone()
    db.close()
    assert seq == 72 and 1 < snap_seq <= seq  # every turn a version; compacted since the first


def wal_resets(path):
    """How many times the WAL was started over (its header's checkpoint sequence number, which
    SQLite increments whenever a writer begins a new WAL after a complete checkpoint)."""
    with open(path + "-wal", "rb") as f:
        head = f.read(16)
    return struct.unpack(">I", head[12:16])[0] if len(head) == 16 else 0


def test_store_size_is_bounded(start_daemon, medium_model, tmp_path):
    """One session, 300 turns of 30 tokens (each delta about a quarter of the 0.5 MiB state, so
    a compaction every few turns; about 70 MiB go through the WAL): the row (snapshot + deltas)
    stays bounded however far the compaction thread falls behind the turns: a compaction is
    asked for at deltas of 1.2 snapshots, turns keep committing while it is rebuilt and its
    pieces written, and writes are held back once the deltas pass 1.5 snapshots, so the worst
    row is 2.5 states plus the turn that crossed, the typical one at most 2.2 states plus a
    turn; the database file (which also holds a compaction's new snapshot until its swap: 3.5
    states at the worst moment) stops growing (freed pages are reused); the WAL file never
    passes 32 MiB plus a few transactions (past 32 MiB the writer checkpoints itself, whether or
    not the checkpoint thread got a core) and is started over as often as that bound needs."""
    sd = tmp_path / "state"
    d = start_daemon(medium_model, *store_args(sd, "--access-log", "false", "--no-store-fsync"))
    sb = json.loads(X.request(d.port, "GET", "/v1/models")[2])["data"][0]["xlserve"]["state_bytes"]
    r = random.Random(8)
    delta = 4 * 2 * 30 * 128 * 4  # the positions of one turn (4 layers, H*Dh 128)
    path = os.path.join(str(sd), "sessions.db")
    db_sizes, wal_sizes, rows = [], [], []
    through, last = 0, (None, 0)  # bytes the WAL took in at least: deltas and snapshots seen
    for i in range(300):
        ok(d.port, "s", "".join(r.choice("abcdefgh ") for _ in range(26)), 4)
        db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
        snap, deltas, snap_seq = db.execute(
            "SELECT snap_bytes, delta_bytes, snap_seq FROM sessions").fetchone()
        db.close()
        rows.append(snap + deltas)
        through += snap if snap_seq != last[0] else max(0, deltas - last[1])
        last = (snap_seq, deltas)
        wal_sizes.append(os.path.getsize(path + "-wal"))
        if i in (149, 299):
            db_sizes.append(os.path.getsize(path))
    resets = wal_resets(path)
    rows.sort()
    assert rows[-1] <= 2.5 * sb + delta + 16384, (rows[-1], sb)
    assert rows[len(rows) // 2] <= 2.2 * sb + delta + 4096, (rows[len(rows) // 2], sb)
    db150, db300 = db_sizes
    assert db300 <= max(db150, 3.5 * sb) + (1 << 20), db_sizes  # not growing with turns
    # a transaction here is a turn's delta or a 0.5 MiB snapshot; 4 MiB is several of them
    assert max(wal_sizes) <= (32 << 20) + (4 << 20), max(wal_sizes)
    # what went through a file of at most 36 MiB: started over at least that many times. How
    # much goes through depends on how many compactions kept up (fewer on a busy machine, where
    # a compaction folds more turns); ~70 MiB on an idle one
    print("\n300 turns: %.1f MiB through the WAL at least, started over %d times, at most %.1f "
          "MiB" % (through / 2**20, resets, max(wal_sizes) / 2**20))
    assert through > (36 << 20), through
    assert resets >= -(-through // (36 << 20)) - 1, (resets, through)


def kill9_rounds(model, tmp_path, n_sessions, rounds, seed, tol):
    sd = tmp_path / "state"
    rnd = random.Random(seed)
    done = {"k%d" % i: [] for i in range(n_sessions)}  # acknowledged transcripts
    inflight = {}

    def verify(d):
        for sid, t in done.items():
            st, s = X.get_session(d.port, sid)
            if st == 404:  # its first turn was cut before its commit
                assert not t and s["error"]["code"] == "session_not_found"
                inflight.pop(sid, None)
                continue
            assert st == 200, s
            cands = [t] if t else []
            if sid in inflight:
                p, n = inflight.pop(sid)
                g = gen(ok(d.port, None, t + p, n))
                cands.append(t + p + g)
            match = [c for c in cands
                     if s["tokens"] == len(c) and s["transcript_digest"] == digest(c[:-1])]
            assert match, (sid, s, len(t))
            done[sid] = continues_like_replay(d.port, sid, match[-1], tol=tol)

    for rnd_i in range(rounds + 1):
        d = X.Daemon(model, store_args(sd, "--access-log", "false"))
        try:
            verify(d)
            if rnd_i == rounds:
                break
            stop = threading.Event()
            errors = []
            acked = set()  # sessions with a turn acknowledged in this round

            def worker(sid, seed):
                r = random.Random(seed)
                try:
                    while not stop.is_set():
                        p = list(("".join(r.choice("abcdefgh ")
                                          for _ in range(r.randint(3, 20)))).encode())
                        n = r.randint(3, 20)
                        inflight[sid] = (p, n)
                        try:
                            st, b = comp(d.port, sid, p, n, timeout=20)
                        except (OSError, http.client.HTTPException):
                            return  # the kill
                        assert st == 200, b
                        done[sid] = done[sid] + p + gen(b)
                        del inflight[sid]
                        acked.add(sid)
                except BaseException as e:  # reported by the main thread
                    errors.append(e)

            ths = [threading.Thread(target=worker, args=(sid, rnd.random()))
                   for sid in done]
            for th in ths:
                th.start()
            # the kill at a random moment once every session has had a turn acknowledged in
            # this round (a slow build on a loaded machine could otherwise be killed before
            # any turn completes, round after round)
            X.wait_until(lambda: len(acked) == len(done) or errors, 120, "a turn per session")
            time.sleep(rnd.uniform(0.4, 1.2))
            d.proc.kill()
            d.proc.wait()
            stop.set()
            for th in ths:
                th.join(30)
            assert not errors, errors[0]
        finally:
            if d.proc.poll() is None:
                assert d.stop() == 0, d.tail()
    stored = rows(sd)
    assert set(stored) == set(done)
    for sid, (tokens, meta, state, deltas) in stored.items():
        assert log_valid(meta, state, deltas), sid
        assert tokens == len(done[sid])
    db = sqlite3.connect(os.path.join(str(sd), "sessions.db"))
    compacted = db.execute("SELECT count(*) FROM sessions WHERE snap_seq > 1").fetchone()[0]
    db.close()
    assert compacted > 0


def test_ram_budget_evicts_to_the_store_and_restores(start_daemon, tmp_path):
    """40 sessions of 0.5 MiB (memory full) under a 3 MiB budget: each continues exactly like
    on a daemon that kept them all, and the daemon's RSS stays under budget + a fixed overhead
    (all of them in RAM would be 20 MiB)."""
    # a state of 0.5 MiB (2 layers x 128 positions x 2 x 256 floats) on a cheap forward
    model = X.write_tiny_model(tmp_path / "wide", d_model=64, d_embed=64, n_head=8, d_head=32,
                               d_inner=64, n_layer=2, mem_len=128)
    env = {"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") +
           ":quarantine_size_mb=1:thread_local_quarantine_size_kb=64"}
    d = start_daemon(model, *store_args(tmp_path / "state", "--session-ram-mb", "3",
                                               "--access-log", "false"), env=env)
    ref = start_daemon(model, "--access-log", "false")
    prompt = "the quick brown fox jumps over the lazy dog; " * 3  # 135 bytes: fills mem_len 128
    ok(d.port, None, prompt, 4)  # warm up: workspaces
    base = X.rss_kb(d.proc.pid)
    peak = base
    n = 40
    for turn in range(2):
        for i in range(n):
            sid = "m%d" % i
            p = prompt[i % 7:] if turn == 0 else " and %d more" % i
            a, b = ok(d.port, sid, p, 6), ok(ref.port, sid, p, 6)
            assert a["choices"][0]["text"] == b["choices"][0]["text"] and X.lps(a) == X.lps(b), sid
            peak = max(peak, X.rss_kb(d.proc.pid))
    st, s = X.get_session(d.port, "m0")
    assert st == 200 and s["turns"] == 2
    grown_mb = (peak - base) / 1024
    if X.binary_sanitizer() != "tsan":  # TSan's shadow memory grows with every byte touched
        assert grown_mb < 3 + 10, "RSS grew %.1f MiB (40 sessions would be 20 MiB)" % grown_mb
    vals = X.metrics(d.port)
    assert vals["xlserve_sessions_evicted_total"] >= n
    assert vals["xlserve_sessions_restored_total"] >= n - 6
    assert vals["xlserve_sessions_in_store"] == n and vals["xlserve_sessions_in_ram"] <= 6
    assert vals["xlserve_store_read_seconds_count"] >= n - 6
    assert vals["xlserve_store_write_seconds_count"] >= 2 * n


def test_budget_under_concurrency(start_daemon, tiny_model, tmp_path):
    """40 sessions under a 1 MiB budget (about 30 fit), 6 clients taking turns on random
    sessions while others read them: evictions, restores and shared loads interleave; every
    session ends holding exactly its client-side transcript."""
    d = start_daemon(tiny_model, *store_args(tmp_path / "state", "--session-ram-mb", "1",
                                             "--access-log", "false"))
    n = 40
    t = {"b%d" % i: [] for i in range(n)}
    locks = {sid: threading.Lock() for sid in t}
    errors = []

    def client(seed):
        r = random.Random(seed)
        try:
            for _ in range(40):
                sid = "b%d" % r.randrange(n)
                if r.random() < 0.3:  # a reader: restores too, may share a load with a turn
                    st, s = X.get_session(d.port, sid)
                    assert st in (200, 404), s
                    continue
                with locks[sid]:
                    p = list(("%s:%d " % (sid, r.randrange(1000))).encode())
                    b = ok(d.port, sid, p, r.randint(1, 6))
                    t[sid] += p + gen(b)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    ths = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(120)
    assert not errors, errors[0]
    for sid, tr in t.items():
        st, s = X.get_session(d.port, sid)
        if not tr:
            assert st == 404
            continue
        assert st == 200 and s["tokens"] == len(tr) and s["transcript_digest"] == digest(tr[:-1])
    for sid in list(t)[:5]:
        if t[sid]:
            continues_like_replay(d.port, sid, t[sid])
    assert X.metric(d.port, "xlserve_sessions_restored_total") > 0


def test_corrupted_rows_are_refused_and_kept(start_daemon, tiny_model, tmp_path):
    sd = tmp_path / "state"
    d = start_daemon(tiny_model, *store_args(sd, "--api-keys", "k1,k2"))
    h1, h2 = {"Authorization": "Bearer k1"}, {"Authorization": "Bearer k2"}
    kinds = ["flip-state", "truncate", "fingerprint", "flip-meta", "flip-delta", "gap", "good"]
    for sid in kinds:
        for _ in range(2 if sid in ("flip-delta", "gap") else 1):  # the second turn: a delta
            st, _, b = X.post_json(d.port, "/v1/completions",
                                   {"prompt": "hello " + sid, "max_tokens": 5, "temperature": 0},
                                   headers={"X-Session-Id": sid, **h1})
            assert st == 200
    assert d.stop() == 0
    db = sqlite3.connect(os.path.join(str(sd), "sessions.db"))
    # a tiny model's snapshot is two pieces: 0 the meta, 1 the state
    state = bytearray(piece(db, "flip-state", 1))
    state[100] ^= 0x10
    set_piece(db, "flip-state", 1, bytes(state))
    state = piece(db, "truncate", 1)
    set_piece(db, "truncate", 1, state[:len(state) // 2])
    meta = bytearray(piece(db, "fingerprint", 0))
    meta[16] ^= 0xff  # another model's session: a valid envelope with another fingerprint
    meta[-8:] = struct.pack("<Q", fnv(bytes(meta[:-8])))
    set_piece(db, "fingerprint", 0, bytes(meta))
    meta = bytearray(piece(db, "flip-meta", 0))
    meta[40] ^= 0x01  # the turn count
    set_piece(db, "flip-meta", 0, bytes(meta))
    delta, = db.execute("SELECT delta FROM deltas WHERE id='flip-delta'").fetchone()
    delta = bytearray(delta)
    delta[80] ^= 0x10  # a key of the turn's positions
    db.execute("UPDATE deltas SET delta=? WHERE id='flip-delta'", (bytes(delta),))
    db.execute("DELETE FROM deltas WHERE id='gap'")  # its row still says version 2
    db.commit()
    db.close()
    d = start_daemon(tiny_model, *store_args(sd, "--api-keys", "k1,k2"))
    why = {"flip-state": "checksum", "truncate": "truncated", "fingerprint": "another model",
           "flip-meta": "checksum", "flip-delta": "delta: checksum", "gap": "version"}
    for sid, word in why.items():
        st, b = X.get_session(d.port, sid, h1)
        assert st == 409 and b["error"]["code"] == "session_incompatible", b
        assert word in b["error"]["message"], b
        st, _, b = X.post_json(d.port, "/v1/completions", {"prompt": "x", "max_tokens": 2},
                               headers={"X-Session-Id": sid, **h1})
        assert st == 409 and b["error"]["code"] == "session_incompatible"
        st, b = X.get_session(d.port, sid, h2)  # another key: never revealed
        assert st == 404 and b["error"]["code"] == "session_not_found"
    st, b = X.get_session(d.port, "good", h1)  # the others are unaffected
    assert st == 200 and b["turns"] == 1
    st, _, b = X.post_json(d.port, "/v1/completions", {"prompt": "x", "max_tokens": 2},
                           headers={"X-Session-Id": "good", **h1})
    assert st == 200
    assert set(rows(sd, check=False)) == set(kinds)  # kept, never silently reset
    # the owner can delete a refused session, or put a good state over it
    st, _, b = X.request(d.port, "DELETE", "/v1/sessions/truncate", headers=h2)
    assert st == 404
    st, _, b = X.request(d.port, "DELETE", "/v1/sessions/truncate", headers=h1)
    assert st == 200 and json.loads(b)["deleted"]
    st, _, blob = X.request(d.port, "GET", "/v1/sessions/good/state", headers=h1)
    assert st == 200
    st, _, b = X.request(d.port, "PUT", "/v1/sessions/flip-state/state", body=blob,
                         headers={**h1, "Content-Type": "application/octet-stream"})
    assert st == 200, b
    assert X.get_session(d.port, "flip-state", h1)[1]["turns"] == 2
    assert "truncate" not in rows(sd, check=False)
    d.wait_log(lambda o: o.get("event") == "session_incompatible")


def test_export_import_between_daemons(start_daemon, tiny_model, medium_model, tmp_path):
    a = start_daemon(tiny_model, *store_args(tmp_path / "a"))
    b = start_daemon(tiny_model, *store_args(tmp_path / "b"), "--api-keys", "kb",
                     "--max-tokens-limit", "1000000")
    hb = {"Authorization": "Bearer kb"}
    ok(a.port, "mv", "Mr. Darcy walked", 30)
    ok(a.port, "mv", " into the room", 20)
    st, h, blob = X.request(a.port, "GET", "/v1/sessions/mv/state")
    assert st == 200 and h["content-type"] == "application/octet-stream"
    assert blob[:8] == b"XLSESS\0\0"
    st, _, r = X.request(b.port, "PUT", "/v1/sessions/moved/state", body=blob,
                         headers={**hb, "Content-Type": "application/octet-stream"})
    assert st == 201, r
    assert json.loads(r)["tokens"] == X.get_session(a.port, "mv")[1]["tokens"]
    x = ok(a.port, "mv", " and said", 30)
    st, y = X.post_json(b.port, "/v1/completions",
                        {"prompt": " and said", "max_tokens": 30, "temperature": 0, "logprobs": 0},
                        headers={"X-Session-Id": "moved", **hb})[::2]
    assert st == 200
    assert x["choices"][0]["text"] == y["choices"][0]["text"] and X.lps(x) == X.lps(y)
    # bad blobs: a clear code
    st, _, r = X.request(b.port, "PUT", "/v1/sessions/bad/state", body=b"not a state",
                         headers=hb)
    assert st == 400 and json.loads(r)["error"]["code"] == "invalid_state"
    st, _, r = X.request(b.port, "PUT", "/v1/sessions/bad/state", body=blob[:-100], headers=hb)
    assert st == 400 and json.loads(r)["error"]["code"] == "invalid_state"
    m = start_daemon(medium_model)
    ok(m.port, "other", "hello", 3)
    other = X.request(m.port, "GET", "/v1/sessions/other/state")[2]
    st, _, r = X.request(b.port, "PUT", "/v1/sessions/bad/state", body=other, headers=hb)
    assert st == 409 and json.loads(r)["error"]["code"] == "session_incompatible"
    assert "another model" in json.loads(r)["error"]["message"]
    assert X.get_session(b.port, "bad", hb)[0] == 404
    # a busy session is not replaced
    c = b.conn()
    c.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": "go", "max_tokens": 500000, "stream": True}),
        headers={"Content-Type": "application/json", "X-Session-Id": "moved", **hb})
    resp = c.getresponse()
    assert resp.status == 200 and resp.read1(65536)
    st, _, r = X.request(b.port, "PUT", "/v1/sessions/moved/state", body=blob, headers=hb)
    assert st == 409 and json.loads(r)["error"]["code"] == "session_busy"
    st, _, r = X.request(b.port, "GET", "/v1/sessions/moved/state", headers=hb)
    assert st == 409
    c.close()
    st, _, r = X.request(b.port, "GET", "/v1/sessions/none/state", headers=hb)
    assert st == 404


def test_import_refuses_inconsistent_and_non_finite_states(start_daemon, tiny_model, tmp_path):
    """A state blob whose checksums are right but whose token counter does not match its ring
    (fed < positions held, a counter about to wrap), or that holds a NaN/Inf key or value: PUT
    answers 400 invalid_state and keeps what was there; the same blob found in the store is
    refused with 409 session_incompatible and kept."""
    sd = tmp_path / "state"
    d = start_daemon(tiny_model, *store_args(sd))
    ok(d.port, "src", "Anne Elliot of Kellynch Hall", 12)  # 40 positions of mem_len 64
    st, _, env = X.request(d.port, "GET", "/v1/sessions/src/state")
    assert st == 200
    same = b"".join(edit_envelope(env, lambda s: None))
    assert same == env  # the re-signing alone is exact
    ok(d.port, "dst", "kept", 3)
    st, kept = X.get_session(d.port, "dst")

    def nan_key(s):
        struct.pack_into("<f", s, 64 + 8, float("nan"))

    def inf_value(s):
        struct.pack_into("<f", s, len(s) - 8 - 12, float("inf"))

    def fed_below_len(s):
        struct.pack_into("<Q", s, 40, struct.unpack_from("<I", s, 36)[0] - 1)

    def fed_wraps(s):
        struct.pack_into("<Q", s, 40, MASK)

    cases = {nan_key: "non-finite", inf_value: "non-finite", fed_below_len: "tokens fed",
             fed_wraps: "more than a state can count"}
    for edit, word in cases.items():
        body = b"".join(edit_envelope(env, edit))
        for sid in ("dst", "fresh"):
            st, _, r = X.request(d.port, "PUT", "/v1/sessions/%s/state" % sid, body=body,
                                 headers={"Content-Type": "application/octet-stream"})
            e = json.loads(r)["error"]
            assert st == 400 and e["code"] == "invalid_state" and word in e["message"], (edit, r)
    assert X.get_session(d.port, "dst")[1] == kept
    assert X.get_session(d.port, "fresh")[0] == 404
    # finite but beyond anything the model's forward pass makes (3e38 overflows attention)
    def huge_key(s):
        struct.pack_into("<f", s, 64 + 8, 3e38)

    def huge_value(s):
        struct.pack_into("<f", s, len(s) - 8 - 12, -1e6)

    for edit, what in ((huge_key, "key"), (huge_value, "value")):
        body = b"".join(edit_envelope(env, edit))
        for sid in ("dst", "fresh"):
            st, _, r = X.request(d.port, "PUT", "/v1/sessions/%s/state" % sid, body=body,
                                 headers={"Content-Type": "application/octet-stream"})
            e = json.loads(r)["error"]
            assert st == 400 and e["code"] == "invalid_state", r
            assert "beyond what this model's forward pass can produce" in e["message"], r
            assert what in e["message"], r
    assert X.get_session(d.port, "dst")[1] == kept
    assert X.get_session(d.port, "fresh")[0] == 404
    # the exported state itself is accepted (it is within the bound)
    st, _, r = X.request(d.port, "PUT", "/v1/sessions/copy/state", body=env,
                         headers={"Content-Type": "application/octet-stream"})
    assert st in (200, 201), r
    assert X.request(d.port, "DELETE", "/v1/sessions/copy")[0] in (200, 204)
    # the same blobs in the store's rows
    for i in range(len(cases)):
        ok(d.port, "row%d" % i, "row", 3)
    assert d.stop() == 0, d.tail()
    db = sqlite3.connect(os.path.join(str(sd), "sessions.db"))
    for i, edit in enumerate(cases):
        meta, state = edit_envelope(env, edit)
        set_piece(db, "row%d" % i, 0, meta)  # a tiny model's snapshot: two pieces
        set_piece(db, "row%d" % i, 1, state)
    db.commit()
    db.close()
    d = start_daemon(tiny_model, *store_args(sd))
    for i, word in enumerate(cases.values()):
        st, b = X.get_session(d.port, "row%d" % i)
        assert st == 409 and b["error"]["code"] == "session_incompatible", b
        assert word in b["error"]["message"], b
    assert {"row%d" % i for i in range(len(cases))} <= set(rows(sd))  # kept


def test_turn_is_committed_before_done(start_daemon, tiny_model, tmp_path):
    sd = tmp_path / "state"
    d = start_daemon(tiny_model, *store_args(sd))
    for i in range(3):
        c = d.conn()
        c.request("POST", "/v1/completions", body=json.dumps(
            {"prompt": "abc" * (i + 1), "max_tokens": 20, "stream": True,
             "stream_options": {"include_usage": True}}),
            headers={"Content-Type": "application/json", "X-Session-Id": "st"})
        r = c.getresponse()
        ev = X.read_sse(r, on_event=lambda data: data != "[DONE]")
        assert ev[-1][1] == "[DONE]"
        held = X.sse_json(ev)[-1]["xlserve"]["session_tokens"]
        assert rows(sd)["st"][0] == held  # in the store when [DONE] arrived
        c.close()


def test_async_durability_commits_within_its_delay(start_daemon, tiny_model, tmp_path):
    sd = tmp_path / "state"
    d = X.Daemon(tiny_model, store_args(sd, "--durability", "async", "--async-commit-ms", "300"))
    try:
        b = ok(d.port, "as", "asynchronous", 10)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 30 and "as" not in rows(sd):
            time.sleep(0.02)
        assert rows(sd)["as"][0] == b["xlserve"]["session_tokens"]
        # committed with nothing else to carry it, within its 300 ms give or take a busy
        # machine (the 60 s delay below is what "waiting" looks like)
        assert time.monotonic() - t0 < 10
    finally:
        d.proc.kill()
        d.proc.wait()
    d = start_daemon(tiny_model, *store_args(sd, "--durability", "async",
                                             "--async-commit-ms", "60000"))
    st, s = X.get_session(d.port, "as")
    assert st == 200 and s["tokens"] == b["xlserve"]["session_tokens"]
    # the turn is a delta (the session was loaded from its row): it waits like a whole state;
    # half a second gives a write that does not wait the time to land where this sees it
    b = ok(d.port, "as", " and more", 10)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.5:
        assert rows(sd)["as"][0] < b["xlserve"]["session_tokens"]  # waiting (60 s)
        time.sleep(0.05)
    # SIGTERM: saves still waiting for their commit are committed before the exit
    d.signal(signal.SIGTERM)
    assert d.wait_exit(30) == 0
    assert rows(sd)["as"][0] == b["xlserve"]["session_tokens"]


def test_ttl_deletes_from_ram_and_store(start_daemon, tiny_model, tmp_path):
    sd = tmp_path / "state"
    d = start_daemon(tiny_model, *store_args(sd, "--session-ttl", "1", "--session-ram-mb", "1"))
    for i in range(40):  # ~33 KB each: most of them live only in the store
        ok(d.port, "tt%d" % i, "x", 1)
    assert len(rows(sd)) == 40
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and rows(sd):
        time.sleep(0.2)
    assert not rows(sd)
    for sid in ("tt0", "tt39"):
        st, b = X.get_session(d.port, sid)
        assert st == 404 and b["error"]["code"] == "session_expired"


def test_one_daemon_per_state_dir(start_daemon, tiny_model, tmp_path):
    sd = tmp_path / "state"
    start_daemon(tiny_model, *store_args(sd))
    d2 = X.Daemon(tiny_model, store_args(sd), wait_ready=False, port=X.free_port())
    assert d2.wait_exit(30) == 1
    d2.reader.join(5)
    assert any("in use by another xlserve" in json.dumps(l) for l in d2.lines)


# ---------------------------------------------------------------------------------------------
# Redis: a write whose reply is lost

class CuttingProxy:
    """A TCP proxy between the daemon and redis-server that can cut one connection at a chosen
    moment. It learns each script's SHA1 from the daemon's SCRIPT LOAD (the script's text names
    it: `marker`), then, when armed:
      cut="reply": forwards the next EVALSHA of that script to Redis, waits until Redis has
        answered it (so the write is applied), and closes both sides instead of forwarding the
        reply (the daemon sees the connection drop after sending);
      cut="index": forwards that script's reply, then closes both sides when the daemon sends
        its index update (ZADD) instead of forwarding it."""

    def __init__(self, redis_port):
        self.redis_port = redis_port
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.shas = {}  # marker -> sha
        self.armed = None  # (marker, cut)
        self.cuts = 0
        self.mu = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def arm(self, marker, cut):
        with self.mu:
            self.armed = (marker, cut)

    def accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self.pipe, args=(c,), daemon=True).start()

    def pipe(self, c):
        r = socket.create_connection(("127.0.0.1", self.redis_port))
        loading = None  # the marker of a SCRIPT LOAD whose reply is awaited
        state = None  # "await_reply": cut the next reply; "await_zadd": cut at the next ZADD
        try:
            while True:
                ready, _, _ = select.select([c, r], [], [])
                if c in ready:
                    data = c.recv(1 << 20)
                    if not data:
                        return
                    if b"SCRIPT" in data and b"LOAD" in data:
                        loading = next((m for m in MARKERS if m in data), None)
                    with self.mu:
                        armed = self.armed
                    if state == "await_zadd" and b"ZADD" in data:
                        with self.mu:
                            self.cuts += 1
                        return
                    if armed and state is None and b"EVALSHA" in data[:40] and \
                            self.shas.get(armed[0], b"?") in data[:200]:
                        with self.mu:
                            self.armed = None
                        state = "await_reply" if armed[1] == "reply" else "await_zadd"
                    r.sendall(data)
                if r in ready:
                    data = r.recv(1 << 20)
                    if not data:
                        return
                    if loading is not None and data.startswith(b"$40\r\n"):
                        self.shas[loading] = data[5:45]
                        loading = None
                    if state == "await_reply":
                        with self.mu:
                            self.cuts += 1
                        return
                    c.sendall(data)
        except OSError:
            return
        finally:
            c.close()
            r.close()

    def close(self):
        self.lsock.close()


APPEND_SCRIPT = b"RPUSH"  # only the append script's text has it
PUT_SCRIPT = b"local existed"  # only the put script's
MARKERS = (APPEND_SCRIPT, PUT_SCRIPT)


@pytest.fixture
def redis_port(tmp_path):
    """The port of a fresh redis-server without persistence, stopped after the test."""
    if REDIS is None:
        pytest.skip(NOT_INSTALLED)
    r = RedisServer(tmp_path / "redis", ("--appendonly", "no"))
    yield r.port
    r.stop()


def stored_tokens(port, sid):
    """The tokens column of session sid's Redis row (prefix t, any owner)."""
    keys = redis_command(port, "KEYS", "t:s:{*:%s}" % sid)
    n = int(keys[1:]) if keys.startswith("*") else 0
    assert n == 1, keys
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"*2\r\n$4\r\nKEYS\r\n$%d\r\nt:s:{*:%s}\r\n" % (len("t:s:{*:%s}" % sid),
                                                               sid.encode()))
        key = s.recv(4096).split(b"\r\n")[2].decode()
    return int(redis_command(port, "HGET", key, "tokens"))


def test_redis_lost_reply_is_outcome_unknown_and_the_next_turn_reads_the_store(
        start_daemon, tiny_model, redis_port):
    """The append script of a turn runs in Redis but its reply is cut (a proxy closes the
    connection after Redis answered): the turn is answered 503 store_outcome_unknown with
    Retry-After, never 'not kept, retrying is safe'. The session is re-read from Redis: it holds
    the turn, and the next turn continues from there (its session_tokens count the unknown
    turn once, no double feed). An index update (ZADD) cut after the row's script succeeded is
    not a failure of the turn: 200, counted, and the index is repaired after a later batch."""
    proxy = CuttingProxy(redis_port)
    d = start_daemon(tiny_model, "--store", "redis", "--redis-url",
                     "redis://127.0.0.1:%d/0" % proxy.port, "--redis-prefix", "t")
    b1 = ok(d.port, "u", "Anne Elliot of Kellynch Hall", 6)
    t1 = b1["xlserve"]["session_tokens"]
    proxy.arm(APPEND_SCRIPT, "reply")
    st, h, b = X.post_json(d.port, "/v1/completions",
                           dict(prompt=" was vain", max_tokens=6, temperature=0),
                           headers={"X-Session-Id": "u"})
    assert proxy.cuts == 1
    assert st == 503 and b["error"]["code"] == "store_outcome_unknown", b
    assert "may or may not" in b["error"]["message"] and "safe" not in b["error"]["message"]
    assert int(h["retry-after"]) >= 1
    t2 = stored_tokens(redis_port, "u")  # Redis applied the turn
    assert t2 > t1
    # the RAM copy was dropped: the session is read back from Redis (after the reconnection's
    # short backoff, 503 store_unavailable meanwhile)
    def read_back():
        st, s = X.get_session(d.port, "u")
        assert st in (200, 503), s
        return s if st == 200 else None
    X.wait_until(read_back, 10, "the session is read back from Redis")
    assert read_back()["tokens"] == t2
    b3 = ok(d.port, "u", " of himself", 4)
    u = b3["usage"]
    assert b3["xlserve"]["session_tokens"] == t2 + u["prompt_tokens"] + u["completion_tokens"]
    assert stored_tokens(redis_port, "u") == b3["xlserve"]["session_tokens"]
    m = X.metrics(d.port)
    assert m["xlserve_store_outcome_unknown_total"] == 1

    # the index update after a new session's first write is cut: the turn is kept and answered
    proxy.arm(PUT_SCRIPT, "index")
    bi = ok(d.port, "v", "Sir Walter", 4)
    assert proxy.cuts == 2
    assert stored_tokens(redis_port, "v") == bi["xlserve"]["session_tokens"]
    m = X.metrics(d.port)
    assert m["xlserve_store_index_errors_total"] == 1
    assert redis_command(redis_port, "ZCARD", "t:lru") == ":1"  # v is not indexed yet

    def repaired():  # any later batch redoes it once the connection is back (after the
        st, b = comp(d.port, "u", " again", 1)  # backoff: 503 store_unavailable meanwhile)
        assert st in (200, 503), b
        return redis_command(redis_port, "ZCARD", "t:lru") == ":2"
    X.wait_until(repaired, 10, "the index update is redone")
    proxy.close()


# ---------------------------------------------------------------------------------------------
# A full disk

@pytest.fixture
def small_fs(tmp_path):
    """A tmpfs of 6 MiB mounted for the test (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs the suite as root)")
    d = tmp_path / "small"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m,mode=0700", "tmpfs", str(d)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: %s" % r.stderr.strip())
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def test_disk_full_fails_cleanly_and_recovers_after_deletes(start_daemon, medium_model,
                                                            small_fs):
    """The store on a 6 MiB filesystem: sessions (each a 512 KiB state) are created until a
    commit fails: a clear error naming the full disk, the turn not kept. Deleting sessions gives
    their space back without moving anything: new sessions commit again in the same directory,
    and after a restart every kept session is whole."""
    sd = small_fs / "state"
    d = start_daemon(medium_model, *store_args(sd))
    prompt = "It is a truth universally acknowledged, that a single man in possession " * 2
    kept, full = [], None
    for i in range(200):
        st, b = comp(d.port, "s%d" % i, prompt, 1)
        if st != 200:
            full = (st, b)
            break
        kept.append(("s%d" % i, b["xlserve"]["session_tokens"]))
    assert full is not None, "6 MiB never filled up"
    st, b = full
    assert st in (500, 503) and b["error"]["code"] == "store_failed", full
    assert "full" in b["error"]["message"], b
    assert len(kept) >= 3, kept
    assert X.get_session(d.port, "s%d" % len(kept))[0] == 404  # not kept
    # delete most sessions: their space comes back
    for sid, _ in kept[:-2]:
        st, _, r = X.request(d.port, "DELETE", "/v1/sessions/" + sid)
        assert st in (200, 204), r
    again = []
    for i in range(3):
        st, b = comp(d.port, "n%d" % i, prompt, 1)
        assert st == 200, b
        again.append(("n%d" % i, b["xlserve"]["session_tokens"]))
    assert d.stop() == 0, d.tail()
    db = sqlite3.connect(os.path.join(str(sd), "sessions.db"))
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    db.close()
    d = start_daemon(medium_model, *store_args(sd))
    for sid, tokens in kept[-2:] + again:
        st, s = X.get_session(d.port, sid)
        assert st == 200 and s["tokens"] == tokens, (sid, s)
    for sid, _ in kept[:-2]:
        assert X.get_session(d.port, sid)[0] == 404


def test_a_forward_that_turns_non_finite_commits_nothing(start_daemon, tiny_model, tmp_path):
    """A stored row whose memory no forward pass of the model makes (every key and value 3e38:
    finite, so it loads; only imports are range-checked) makes the next forward's outputs
    non-finite: the turn fails with a clear error, nothing of it is committed (the row and its
    log are as they were), and the session still answers as stored; other sessions are
    served."""
    sd = tmp_path / "state"
    d = start_daemon(tiny_model, *store_args(sd))
    ok(d.port, "bad", "Anne Elliot of Kellynch Hall", 4)
    ok(d.port, "good", "Sir Walter Elliot", 4)
    st, _, env = X.request(d.port, "GET", "/v1/sessions/bad/state")
    assert st == 200
    assert d.stop() == 0, d.tail()

    def huge(s):
        for at in range(64, len(s) - 8, 4):
            struct.pack_into("<f", s, at, 3e38 if at % 8 else -3e38)
    meta, state = edit_envelope(env, huge)
    db = sqlite3.connect(os.path.join(str(sd), "sessions.db"))
    set_piece(db, "bad", 0, meta)
    set_piece(db, "bad", 1, state)
    db.commit()
    db.close()
    before = rows(sd)["bad"]
    d = start_daemon(tiny_model, *store_args(sd))
    st0, s0 = X.get_session(d.port, "bad")
    assert st0 == 200
    st, b = comp(d.port, "bad", " was vain", 4)
    assert st == 500 and b["error"]["code"] == "generation_failed", b
    assert "non-finite" in b["error"]["message"] and "not kept" in b["error"]["message"], b
    assert X.get_session(d.port, "bad") == (st0, s0)
    assert rows(sd)["bad"] == before  # nothing committed
    ok(d.port, "good", " of Kellynch", 3)

"""Session ids are per API key: (key, id) names a session. Key b's `alice-1` is b's own
session, created on b's first use whatever key a holds; no answer to b (lookups, creates, fork,
export, import, delete, list) depends on which ids another key uses. With and without the
store, across a restart, and for a store written by the first schema (rows keyed by id alone),
which is migrated at start and keeps serving each session to its owner."""
import json
import os
import sqlite3
import struct

import pytest

import xlharness as X

A, B = {"Authorization": "Bearer ka"}, {"Authorization": "Bearer kb"}


def comp(port, key, sid, prompt, n=6):
    st, _, b = X.post_json(port, "/v1/completions",
                           {"prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 0},
                           headers={**key, "X-Session-Id": sid})
    assert st == 200, b
    return b


def answers(port, key, sid):
    """What key gets for sid on every read-only or refusing route: (status, error code)."""
    out = []
    for method, path in [("GET", "/v1/sessions/%s" % sid), ("GET", "/v1/sessions/%s/state" % sid),
                         ("POST", "/v1/sessions/%s/fork" % sid),
                         ("DELETE", "/v1/sessions/%s" % sid)]:
        st, _, b = X.request(port, method, path, headers=key)
        code = json.loads(b)["error"]["code"] if st >= 400 else None
        out.append((method, path.replace(sid, "ID"), st, code))
    return out


def listed(port, key):
    st, _, b = X.request(port, "GET", "/v1/sessions", headers=key)
    assert st == 200
    return {s["id"]: s for s in json.loads(b)["data"]}


@pytest.mark.parametrize("store", [False, True], ids=["ram", "store"])
def test_ids_are_per_key(start_daemon, tiny_model, tmp_path, store):
    args = ["--api-keys", "ka,kb"] + (["--state-dir", str(tmp_path / "state")] if store else [])
    d = start_daemon(tiny_model, *args)
    p = d.port
    a1 = comp(p, A, "alice-1", "Elizabeth Bennet")
    comp(p, A, "alice-1", " of Longbourn")
    st, sa = X.get_session(p, "alice-1", A)
    assert st == 200 and sa["turns"] == 2
    # b's answers for a's id are those for an id nobody uses
    assert answers(p, B, "alice-1") == answers(p, B, "nobody-9")
    assert all(st == 404 and code == "session_not_found" for _, _, st, code in
               answers(p, B, "alice-1"))
    assert listed(p, B) == {}
    # b's own alice-1: a fresh session, the same reply as a's first turn
    b1 = comp(p, B, "alice-1", "Elizabeth Bennet")
    assert b1["choices"][0]["text"] == a1["choices"][0]["text"]
    assert b1["xlserve"]["session_tokens"] == a1["xlserve"]["session_tokens"]
    st, sb = X.get_session(p, "alice-1", B)
    assert st == 200 and sb["turns"] == 1
    assert X.get_session(p, "alice-1", A)[1] == sa  # a's is untouched
    assert set(listed(p, A)) == {"alice-1"} and set(listed(p, B)) == {"alice-1"}
    assert listed(p, B)["alice-1"]["turns"] == 1
    # fork and export/import stay within the key
    st, _, f = X.request(p, "POST", "/v1/sessions/alice-1/fork", headers=B)
    assert st == 201
    f = json.loads(f)
    assert f["forked_from"] == "alice-1" and f["turns"] == 1
    st, _, blob = X.request(p, "GET", "/v1/sessions/alice-1/state", headers=A)
    assert st == 200
    st, _, r = X.request(p, "PUT", "/v1/sessions/%s/state" % f["id"], body=blob,
                         headers={**B, "Content-Type": "application/octet-stream"})
    assert st == 200 and json.loads(r)["turns"] == 2, r  # b's fork replaced by a's state
    assert X.get_session(p, f["id"], A)[0] == 404  # b's fork is b's alone
    # a new id minted for b, then used by a: two sessions again
    st, _, m = X.request(p, "POST", "/v1/sessions", headers=B)
    mid = json.loads(m)["id"]
    assert X.get_session(p, mid, A)[0] == 404
    comp(p, A, mid, "Mr. Collins")
    assert X.get_session(p, mid, B)[1]["tokens"] == 0
    # delete is per key too
    st, _, _ = X.request(p, "DELETE", "/v1/sessions/alice-1", headers=B)
    assert st == 200
    assert X.get_session(p, "alice-1", B)[0] == 404
    assert X.get_session(p, "alice-1", A)[1] == sa
    # an import under a's id, by b: created as b's own (201, as for an id nobody uses); a's
    # session is not replaced
    octet = {**B, "Content-Type": "application/octet-stream"}
    for sid in ("nobody-7", "alice-1"):
        st, _, r = X.request(p, "PUT", "/v1/sessions/%s/state" % sid, body=blob, headers=octet)
        assert st == 201 and json.loads(r)["turns"] == 2, (sid, st, r)
    assert X.get_session(p, "alice-1", A)[1] == sa
    assert X.get_session(p, "alice-1", B)[1]["turns"] == 2
    if not store:
        return
    comp(p, B, "alice-1", "Jane")
    st, sb = X.get_session(p, "alice-1", B)
    assert d.stop() == 0, d.tail()
    db = sqlite3.connect(os.path.join(str(tmp_path / "state"), "sessions.db"))
    n = db.execute("SELECT count(*) FROM sessions WHERE id = 'alice-1'").fetchone()[0]
    db.close()
    assert n == 2  # one row per key
    d = start_daemon(tiny_model, *args)
    for key, before in ((A, sa), (B, sb)):
        st, s = X.get_session(d.port, "alice-1", key)
        assert st == 200 and not s["busy"]
        assert (s["tokens"], s["turns"], s["transcript_digest"]) == \
            (before["tokens"], before["turns"], before["transcript_digest"])


# The first store schema, exactly as the first version of store_sqlite.c created it.
V1_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY NOT NULL, owner BLOB NOT NULL,
  fingerprint INTEGER NOT NULL, created REAL NOT NULL, last_used REAL NOT NULL,
  tokens INTEGER NOT NULL, turns INTEGER NOT NULL, mode INTEGER NOT NULL,
  messages INTEGER NOT NULL, positions INTEGER NOT NULL, meta BLOB NOT NULL,
  state BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_by_owner ON sessions (owner, last_used);
CREATE INDEX IF NOT EXISTS sessions_by_last_used ON sessions (last_used);
PRAGMA user_version = 1;
"""
COLS = ("id, owner, fingerprint, created, last_used, tokens, turns, mode, messages, positions, "
        "meta, state")


def test_store_of_the_first_schema_is_migrated(start_daemon, tiny_model, tmp_path):
    """Sessions of two keys, stored; the file rewritten into the first schema (the same rows);
    the daemon opens it, migrates it, and every session continues for its owner exactly like
    on a daemon that never stopped."""
    sd = tmp_path / "state"
    args = ["--api-keys", "ka,kb", "--state-dir", str(sd)]
    d = start_daemon(tiny_model, *args)
    ref = start_daemon(tiny_model, "--api-keys", "ka,kb")
    for port in (d.port, ref.port):
        comp(port, A, "old-a", "It is a truth universally acknowledged")
        comp(port, A, "old-a", ", that a single man")
        comp(port, B, "old-b", "Catherine Morland")
    before = {sid: X.get_session(d.port, sid, key)[1] for sid, key in (("old-a", A), ("old-b", B))}
    # a first-schema row holds the whole envelope: the export's (this store keeps old-a's second
    # turn as a delta after its snapshot)
    env = {}
    for sid, key in (("old-a", A), ("old-b", B)):
        st, _, env[sid] = X.request(d.port, "GET", "/v1/sessions/%s/state" % sid, headers=key)
        assert st == 200
    assert d.stop() == 0, d.tail()
    path = os.path.join(str(sd), "sessions.db")
    db = sqlite3.connect(path)
    rows = []
    for r in db.execute("SELECT %s FROM sessions" % COLS.replace(", meta, state", "")):
        e = env[r[0]]
        n_msgs, tail = struct.unpack_from("<II", e, 104)
        ml = 128 + 9 * n_msgs + tail + 8
        rows.append(tuple(r) + (e[:ml], e[ml:]))
    assert len(rows) == 2
    db.close()
    for f in os.listdir(str(sd)):
        if f.startswith("sessions.db"):
            os.unlink(os.path.join(str(sd), f))
    db = sqlite3.connect(path)
    db.executescript("PRAGMA page_size=65536; PRAGMA journal_mode=WAL;" + V1_SCHEMA)
    db.executemany("INSERT INTO sessions (%s) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)" % COLS, rows)
    db.commit()
    assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    db.close()

    d = start_daemon(tiny_model, *args)
    assert d.wait_log(lambda o: o.get("event") == "store")["msg"].endswith("2 sessions stored")
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 5
    db.close()
    for sid, key, other in (("old-a", A, B), ("old-b", B, A)):
        st, s = X.get_session(d.port, sid, key)
        assert st == 200
        assert (s["tokens"], s["turns"], s["transcript_digest"]) == \
            (before[sid]["tokens"], before[sid]["turns"], before[sid]["transcript_digest"])
        assert X.get_session(d.port, sid, other)[0] == 404
        x, y = comp(d.port, key, sid, " and more", 12), comp(ref.port, key, sid, " and more", 12)
        assert x["choices"][0]["text"] == y["choices"][0]["text"] and X.lps(x) == X.lps(y)
    # the other key may now have an old-a of its own, next to the migrated one
    comp(d.port, B, "old-a", "Henry Tilney")
    assert X.get_session(d.port, "old-a", A)[1]["turns"] == 3
    assert X.get_session(d.port, "old-a", B)[1]["turns"] == 1


@pytest.mark.parametrize("store", [False, True], ids=["ram", "store"])
def test_another_keys_busy_session_is_not_in_the_way(start_daemon, tiny_model, tmp_path, store):
    """While key a's `shared` generates, a's own requests for it get 409 session_busy; key b's
    `shared` is b's, so b is answered as if a did not exist (a turn, fork, delete)."""
    args = ["--api-keys", "ka,kb", "--max-tokens-limit", "1000000"] + (
        ["--state-dir", str(tmp_path / "state")] if store else [])
    d = start_daemon(tiny_model, *args)
    p = d.port
    c = d.conn()
    c.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": "go", "max_tokens": 1000000, "stream": True}),
        headers={**A, "Content-Type": "application/json", "X-Session-Id": "shared"})
    r = c.getresponse()
    assert r.status == 200 and r.read1(65536)  # a's turn is generating
    st, _, b = X.post_json(p, "/v1/completions", {"prompt": "x", "max_tokens": 1},
                           {**A, "X-Session-Id": "shared"})
    assert st == 409 and b["error"]["code"] == "session_busy", b
    assert X.get_session(p, "shared", A)[1]["busy"] is True
    comp(p, B, "shared", "Anne Elliot", 4)
    st, sb = X.get_session(p, "shared", B)
    assert st == 200 and sb["turns"] == 1 and sb["busy"] is False
    st, _, f = X.request(p, "POST", "/v1/sessions/shared/fork", headers=B)
    assert st == 201, f
    st, _, _ = X.request(p, "DELETE", "/v1/sessions/shared", headers=B)
    assert st == 200
    assert X.get_session(p, "shared", A)[1]["busy"] is True  # a's turn runs on
    c.close()  # a leaves: its turn is cancelled and its session released
    X.wait_until(lambda: X.get_session(p, "shared", A)[1]["busy"] is False,
                 what="a's session released")

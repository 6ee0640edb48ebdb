"""A turn whose commit fails (durability turn, the store's disk full) is not kept: the reply is
500 store_failed (a stream: an in-band store_failed error before [DONE]) saying so, the session
is back at its last committed turn, and a retry once there is room feeds the prompt once: its
reply and the session's transcript equal those of a daemon that never failed.

The store lives on a tmpfs of 4 MiB mounted for the test (root is needed; the test is skipped
when mount is not permitted). The disk is filled with a filler file after the first turn; the
second turn's state (hundreds of positions of a wide model: over a MiB) cannot fit in what the
store's files already hold, so its commit fails whatever SQLite's WAL reuses."""
import errno
import os
import subprocess

import pytest

import xlharness as X


@pytest.fixture
def tiny_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: " + r.stderr.strip())
    try:
        yield mnt
    finally:  # the test's daemons have stopped (start_daemon is set up after this fixture)
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path):
    """Writes path until the filesystem is full; returns the bytes written."""
    n = 0
    chunk = b"\0" * 65536
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                n += f.write(chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                break
        try:  # the last partial block
            while f.write(b"\0" * 512):
                n += 512
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    return n


def turn(port, sid, prompt, n, stream=False):
    """(status, headers, JSON body), or (status, headers, SSE events) for a stream."""
    body = dict(prompt=prompt, max_tokens=n, temperature=0, logprobs=0, stream=stream)
    h = {"X-Session-Id": sid}
    if stream:
        return X.stream(port, "/v1/completions", body, headers=h)
    return X.post_json(port, "/v1/completions", body, headers=h)


def test_failed_commit_rolls_back_and_retry_is_safe(tiny_disk, start_daemon, tmp_path):
    # 2 KiB of keys/values per position: 700 positions are 1.4 MiB of state
    model = X.write_tiny_model(tmp_path / "wide", d_head=32, mem_len=1024)
    d = start_daemon(model, "--state-dir", str(tiny_disk / "state"), "--durability", "turn")
    ref = start_daemon(model)  # never fails: the transcript a retry must reproduce
    p1, p2 = "Emma Woodhouse, handsome, clever", " and rich, " * 64  # 704 bytes
    for port in (d.port, ref.port):
        st, _, b = turn(port, "full", p1, 8)
        assert st == 200, b
    st, before = X.get_session(d.port, "full")
    assert st == 200 and before["turns"] == 1
    filler = tiny_disk / "filler"
    assert fill(filler) > 0
    # non-streamed, twice: 500 store_failed, the turn not kept
    for _ in range(2):
        st, h, b = turn(d.port, "full", p2, 8)
        assert st == 500 and b["error"]["code"] == "store_failed", b
        assert h.get("retry-after") == "1"  # a retry is safe, once the store has room
        st, s = X.get_session(d.port, "full")
        assert st == 200, s
        assert (s["tokens"], s["turns"], s["transcript_digest"]) == \
            (before["tokens"], before["turns"], before["transcript_digest"])
        assert "not kept" in b["error"]["message"] and "retrying" in b["error"]["message"], b
    # streamed: the text went out, then the in-band error says the turn was not kept
    st, _, ev = turn(d.port, "full", p2, 8, stream=True)
    assert st == 200 and ev[-1][1] == "[DONE]"
    chunks = X.sse_json(ev)
    err = chunks[-1]["error"]
    assert err["code"] == "store_failed" and "not kept" in err["message"], chunks[-1]
    assert any(c.get("choices") and c["choices"][0].get("text") for c in chunks[:-1])
    st, s = X.get_session(d.port, "full")
    assert st == 200 and s["tokens"] == before["tokens"] and s["turns"] == 1
    # a new session whose first turn cannot be committed leaves nothing behind
    st, _, b = turn(d.port, "first", p2, 4)
    assert st == 500 and b["error"]["code"] == "store_failed", b
    st, b = X.get_session(d.port, "first")
    assert st == 404 and b["error"]["code"] == "session_not_found", b
    d.wait_log(lambda o: o.get("event") == "turn_rolled_back")
    # room again: the retry is the turn a daemon that never failed took
    os.unlink(filler)
    st, _, a = turn(d.port, "full", p2, 8)
    assert st == 200, a
    st, _, r = turn(ref.port, "full", p2, 8)
    assert st == 200
    assert a["choices"][0]["text"] == r["choices"][0]["text"] and X.lps(a) == X.lps(r)
    assert a["xlserve"]["session_tokens"] == r["xlserve"]["session_tokens"]
    sa, sr = X.get_session(d.port, "full")[1], X.get_session(ref.port, "full")[1]
    assert (sa["tokens"], sa["turns"], sa["transcript_digest"]) == \
        (sr["tokens"], sr["turns"], sr["transcript_digest"])
    assert X.metric(d.port, "xlserve_store_errors_total") >= 4

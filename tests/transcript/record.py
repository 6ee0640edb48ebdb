"""record.py: a seeded HTTP transcript of the real daemon on loopback, every endpoint and its
error cases, written as text so that two builds can be compared byte for byte.

    python3 tests/transcript/record.py OUT.txt      (XLSERVE_BIN: the daemon; default build/)

The transcript is a refactoring's witness: it is recorded on the code before a change and must
come out identical after it (test_transcript.py re-records and compares). Requests go one at a
time, every sampling request is seeded and the daemon runs its portable kernels (the same
numbers whatever the machine's vector units), so every answer is reproducible. What is inherently
variable is normalised, and only that:
  - the ids the daemon mints at random (completion ids `cmpl-...`/`chatcmpl-...`, session ids of
    POST /v1/sessions and fork): each distinct value becomes <id-N> / <session-N>, N in order of
    first appearance, so equal ids stay visibly equal;
  - the request id of each answer (X-Request-Id), likewise <request-N>;
  - times: `created`, `last_used` and every `*_at` field (Unix seconds), the Date header;
  - the order in which the choices of an n > 1 stream interleave (each choice's own events keep
    their order; the events are listed choice by choice);
  - the daemon's version string (/version, Server header) and the build's git description;
  - /metrics: its body (durations, and counts of the readiness polls); status and type are kept.
  - a session state blob (GET/PUT .../state) is recorded by its length and the SHA-256 of its
    bytes with the two times of its envelope (created, last used), the session's random state
    (seeded at random when the session is made) and the envelope's checksum, which covers them,
    set to zero.
"""
import hashlib
import http.client
import json
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import xlharness as X  # noqa: E402

C = "/v1/completions"
CH = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]
PERSON = {"type": "object", "additionalProperties": False,
          "properties": {"name": {"type": "string", "maxLength": 8},
                         "age": {"type": "integer"}, "ok": {"type": "boolean"}},
          "required": ["name", "age", "ok"]}

# the portable kernels: the same numbers on every x86 machine whatever its vector units
ENV = {"XLSERVE_CPU": "portable"}

# headers whose value is not the daemon's answer to the request
SKIP_HEADERS = {"date"}


class Normaliser:
    """Replaces the inherently variable parts of a transcript (see the module comment)."""

    def __init__(self):
        self.ids = {}
        self.sessions = {}
        self.requests = {}

    def _name(self, table, value, prefix):
        if value not in table:
            table[value] = "<%s-%d>" % (prefix, len(table) + 1)
        return table[value]

    def session(self, sid):
        """A minted session id (from POST /v1/sessions or fork): named from now on."""
        return self._name(self.sessions, sid, "session")

    def request(self, rid):
        """A request id the daemon minted (X-Request-Id): named from now on."""
        return self._name(self.requests, rid, "request")

    def text(self, s):
        for rid in self.requests:
            s = s.replace(rid, self.requests[rid])
        s = re.sub(r"\b(chatcmpl|cmpl)-[0-9A-Za-z]+",
                   lambda m: self._name(self.ids, m.group(0), "id"), s)
        for sid in sorted(self.sessions, key=len, reverse=True):
            s = s.replace(sid, self.sessions[sid])
        s = re.sub(r'"(created|last_used|[a-z_]*_at)": ?[0-9]+(\.[0-9]+)?', r'"\1": <time>', s)
        s = re.sub(r'"(version|git)": ?"[^"]*"', r'"\1": "<version>"', s)
        return s


def state_digest(blob):
    """'<N bytes, sha256 H>' of a state blob without its clock (see the module comment); the
    envelope: magic 8, version 4, header length 4, fingerprint 8, created f64 at 24, last used
    f64 at 32, ..., random state 4 x u64 at 72, message count u32 at 104, tail length u32 at 108; its checksum ends it."""
    b = bytearray(blob)
    if len(b) >= 112 and b[:6] == b"XLSESS":
        b[24:40] = bytes(16)
        b[72:104] = bytes(32)
        hdr = int.from_bytes(b[12:16], "little")
        end = hdr + 9 * int.from_bytes(b[104:108], "little") + \
            int.from_bytes(b[108:112], "little") + 8
        if end <= len(b):
            b[end - 8:end] = bytes(8)
    return "<%d bytes, sha256 %s>" % (len(b), hashlib.sha256(bytes(b)).hexdigest())


class Recorder:
    def __init__(self, out):
        self.out = out
        self.norm = Normaliser()

    def write(self, line):
        self.out.append(self.norm.text(line))

    def exchange(self, port, label, method, path, body=None, headers=None, raw_body=False,
                 keep=None):
        """One request and its whole answer (status, headers, body) in the transcript; returns
        (status, headers, body bytes). keep(headers, body): names minted session ids."""
        h = dict(headers or {})
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body, sort_keys=True).encode()
            h.setdefault("Content-Type", "application/json")
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        payload = r.read()
        hdrs = [(k.lower(), v) for k, v in r.getheaders()]
        c.close()
        if "x-request-id" in dict(hdrs):
            self.norm.request(dict(hdrs)["x-request-id"])
        if keep:
            keep(dict(hdrs), payload)
        self.write("### %s" % label)
        self.write("> %s %s" % (method, path))
        for k in sorted(h):
            self.write("> %s: %s" % (k, h[k]))
        if data is not None:
            self.write("> " + (data.decode("utf-8", "backslashreplace")
                               if not raw_body else state_digest(data)))
        self.write("< %d %s" % (r.status, r.reason))
        for k, v in sorted(hdrs):
            if k in SKIP_HEADERS:
                continue
            if k == "server":
                v = "<version>"
            if k == "content-length" and path.endswith("/metrics"):
                v = "<length>"
            self.write("< %s: %s" % (k, v))
        ctype = dict(hdrs).get("content-type", "")
        if ctype.startswith("application/octet-stream"):
            self.write("< " + state_digest(payload))
        elif path.endswith("/metrics"):
            self.write("< <metrics>")
        elif ctype.startswith("text/event-stream"):
            self.write("< " + sse_by_choice(payload.decode("utf-8", "backslashreplace")))
        else:
            self.write("< " + payload.decode("utf-8", "backslashreplace"))
        self.write("")
        return r.status, dict(hdrs), payload


def sse_by_choice(text):
    """An SSE body with its data events ordered choice by choice (a stable sort: each choice's
    events, and everything that is not one choice's event, keep their order; the latter last)."""
    events = text.split("\n\n")

    def key(ev):
        if ev.startswith("data: {"):
            try:
                ch = json.loads(ev[6:]).get("choices") or []
            except ValueError:
                return 1 << 30
            if len(ch) == 1 and isinstance(ch[0].get("index"), int):
                return ch[0]["index"]
        return 1 << 30
    return "\n\n".join(sorted(events, key=key)) if len(events) > 1 else text


def minted(rec):
    def keep(hdrs, payload):
        try:
            rec.norm.session(json.loads(payload)["id"])
        except (ValueError, KeyError, TypeError):
            pass
    return keep


def main_daemon_exchanges(rec, port):
    E = rec.exchange
    # service endpoints
    E(port, "health", "GET", "/health")
    E(port, "health HEAD", "HEAD", "/health")
    E(port, "metrics", "GET", "/metrics")
    E(port, "models", "GET", "/v1/models")
    st, _, b = E(port, "models", "GET", "/v1/models")
    mid = json.loads(b)["data"][0]["id"]
    E(port, "one model", "GET", "/v1/models/" + mid)
    E(port, "unknown model", "GET", "/v1/models/nope")
    E(port, "version", "GET", "/version")
    E(port, "version v1", "GET", "/v1/version")
    E(port, "web page", "HEAD", "/")
    # tokenizer
    text = "Caf\u00e9 \u2014 tokens\n\u65e5\u672c"
    for p in ("/tokenize", "/v1/tokenize"):
        E(port, "tokenize", "POST", p, {"prompt": text, "add_special_tokens": False,
                                        "return_token_strs": True})
    E(port, "tokenize llama.cpp", "POST", "/tokenize",
      {"content": "ab\u00e9", "add_special": True, "with_pieces": True})
    E(port, "tokenize chat", "POST", "/tokenize", {"messages": MSG})
    E(port, "detokenize", "POST", "/detokenize", {"tokens": [104, 105, 195, 169]})
    E(port, "detokenize empty", "POST", "/v1/detokenize", {"tokens": []})
    E(port, "tokenizer_info", "GET", "/tokenizer_info")
    E(port, "tokenizer_info v1", "GET", "/v1/tokenizer_info")
    E(port, "tokenize bad json", "POST", "/tokenize", b"[1,2]")
    E(port, "tokenize bad field", "POST", "/tokenize", {"prompt": 5})
    E(port, "tokenize bad flag", "POST", "/tokenize", {"prompt": "a", "add_special_tokens": 1})
    E(port, "tokenize unknown model", "POST", "/tokenize", {"prompt": "a", "model": "nope"})
    E(port, "detokenize bad ids", "POST", "/detokenize", {"tokens": [1, 999]})
    E(port, "detokenize bad type", "POST", "/detokenize", {"tokens": "x"})
    # completions: greedy, seeded sampling, n > 1, best_of, echo, logprobs, stop, streams
    E(port, "greedy", "POST", C, {"prompt": "Hello", "max_tokens": 12, "temperature": 0})
    E(port, "seeded", "POST", C, {"prompt": "Once upon", "max_tokens": 16, "seed": 5,
                                  "temperature": 0.9, "top_p": 0.95, "top_k": 40})
    E(port, "penalties", "POST", C, {"prompt": "abc", "max_tokens": 16, "seed": 2,
                                     "presence_penalty": 0.5, "frequency_penalty": 0.3,
                                     "repetition_penalty": 1.2, "min_p": 0.05})
    E(port, "n=3", "POST", C, {"prompt": "Tea", "max_tokens": 8, "n": 3, "seed": 9})
    E(port, "best_of", "POST", C, {"prompt": "Tea", "max_tokens": 8, "n": 2, "best_of": 3,
                                   "seed": 9})
    E(port, "echo logprobs", "POST", C, {"prompt": "The cat sat", "echo": True, "logprobs": 2,
                                         "max_tokens": 0})
    E(port, "echo tail", "POST", C, {"prompt": "The cat", "echo": True, "logprobs": 1,
                                     "max_tokens": 4, "temperature": 0})
    E(port, "logprobs", "POST", C, {"prompt": "x", "logprobs": 3, "max_tokens": 5, "seed": 1})
    E(port, "stop", "POST", C, {"prompt": "Hello", "max_tokens": 40, "seed": 3,
                                "stop": [" ", "e"]})
    E(port, "logit_bias", "POST", C, {"prompt": "Hi", "max_tokens": 6, "temperature": 0,
                                      "logit_bias": {"120": 100, "97": -100}})
    E(port, "token prompt", "POST", C, {"prompt": [72, 105], "max_tokens": 4, "temperature": 0})
    E(port, "stream", "POST", C, {"prompt": "Stream", "max_tokens": 6, "seed": 4,
                                  "stream": True,
                                  "stream_options": {"include_usage": True}})
    E(port, "stream n=2 logprobs", "POST", C, {"prompt": "S", "max_tokens": 4, "seed": 4,
                                               "n": 2, "stream": True, "logprobs": 1})
    E(port, "structured", "POST", C, {"prompt": "Record:", "max_tokens": 200, "seed": 11,
                                      "response_format": {"type": "json_schema", "json_schema": {
                                          "name": "p", "schema": PERSON, "strict": True}}})
    E(port, "json_object", "POST", C, {"prompt": "Record:", "max_tokens": 60, "seed": 12,
                                       "response_format": {"type": "json_object"}})
    # chat
    E(port, "chat", "POST", CH, {"messages": [{"role": "system", "content": "Be brief."},
                                              {"role": "user", "content": "hi"}],
                                 "max_tokens": 10, "seed": 1})
    E(port, "chat logprobs", "POST", CH, {"messages": MSG, "max_completion_tokens": 5,
                                          "logprobs": True, "top_logprobs": 2, "seed": 2})
    E(port, "chat stream", "POST", CH, {"messages": MSG, "max_tokens": 6, "seed": 3,
                                        "stream": True, "n": 2})
    E(port, "chat structured stream", "POST", CH, {
        "messages": MSG, "max_tokens": 200, "seed": 2, "stream": True,
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "p", "schema": PERSON}}})
    # sessions: named by the client, minted by the server, forked, exported, imported
    h = {"X-Session-Id": "t-1"}
    E(port, "session turn 1", "POST", C, {"prompt": "Hello", "max_tokens": 5, "temperature": 0},
      headers=h)
    E(port, "session turn 2", "POST", C, {"prompt": " again", "max_tokens": 5, "seed": 8},
      headers=h)
    E(port, "session continue", "POST", C, {"prompt": "", "max_tokens": 3, "temperature": 0},
      headers=h)
    E(port, "session by body", "POST", C, {"prompt": "B", "max_tokens": 3, "temperature": 0,
                                           "session_id": "t-2"})
    E(port, "session get", "GET", "/v1/sessions/t-1")
    E(port, "session HEAD", "HEAD", "/v1/sessions/t-1")
    E(port, "chat session 1", "POST", CH, {"messages": MSG, "max_tokens": 5, "seed": 1},
      headers={"X-Session-Id": "c-1"})
    st, _, b = E(port, "chat session 1 again", "POST", CH,
                 {"messages": MSG, "max_tokens": 5, "seed": 1})
    reply = json.loads(b)["choices"][0]["message"]["content"]
    E(port, "chat session full history", "POST", CH,
      {"messages": MSG + [{"role": "assistant", "content": reply},
                          {"role": "user", "content": "more"}], "max_tokens": 5, "seed": 1},
      headers={"X-Session-Id": "c-1"})
    E(port, "chat session append", "POST", CH,
      {"messages": [{"role": "user", "content": "and"}], "max_tokens": 5, "seed": 1,
       "history": "append"}, headers={"X-Session-Id": "c-1"})
    E(port, "session create", "POST", "/v1/sessions", keep=minted(rec))
    minted_id = next(iter(rec.norm.sessions))
    E(port, "minted turn", "POST", C, {"prompt": "Hi", "max_tokens": 4, "temperature": 0},
      headers={"X-Session-Id": minted_id})
    E(port, "fork", "POST", "/v1/sessions/t-1/fork", keep=minted(rec))
    fork_id = list(rec.norm.sessions)[-1]
    E(port, "fork turn", "POST", C, {"prompt": " more", "max_tokens": 6, "temperature": 0},
      headers={"X-Session-Id": fork_id})
    E(port, "parent turn", "POST", C, {"prompt": " more", "max_tokens": 6, "temperature": 0},
      headers={"X-Session-Id": "t-1"})
    E(port, "session list", "GET", "/v1/sessions")
    E(port, "session list limit", "GET", "/v1/sessions?limit=2")
    E(port, "session list bad limit", "GET", "/v1/sessions?limit=0")
    st, _, blob = E(port, "export", "GET", "/v1/sessions/t-1/state")
    E(port, "import", "PUT", "/v1/sessions/t-copy/state", blob, raw_body=True,
      headers={"Content-Type": "application/octet-stream"})
    E(port, "import over", "PUT", "/v1/sessions/t-copy/state", blob, raw_body=True,
      headers={"Content-Type": "application/octet-stream"})
    E(port, "imported get", "GET", "/v1/sessions/t-copy")
    E(port, "imported turn", "POST", C, {"prompt": "!", "max_tokens": 5, "temperature": 0},
      headers={"X-Session-Id": "t-copy"})
    E(port, "import garbage", "PUT", "/v1/sessions/t-bad/state", b"XLSESS\0\0garbage",
      raw_body=True, headers={"Content-Type": "application/octet-stream"})
    E(port, "import truncated", "PUT", "/v1/sessions/t-bad/state", blob[:len(blob) // 2],
      raw_body=True, headers={"Content-Type": "application/octet-stream"})
    E(port, "delete", "DELETE", "/v1/sessions/t-2")
    E(port, "delete again", "DELETE", "/v1/sessions/t-2")
    E(port, "get deleted", "GET", "/v1/sessions/t-2")
    E(port, "unknown session state", "GET", "/v1/sessions/nobody/state")
    E(port, "fork unknown", "POST", "/v1/sessions/nobody/fork")
    E(port, "bad session id", "GET", "/v1/sessions/bad$id")
    # transport errors
    E(port, "no route", "GET", "/nope")
    E(port, "no route v1", "POST", "/v1/nope", {})
    E(port, "405", "PUT", "/v1/sessions/t-1")
    E(port, "405 completions", "GET", C)
    E(port, "405 health", "POST", "/health", b"")
    E(port, "413", "POST", C, {"prompt": "x" * 5000})
    E(port, "422", "POST", C, {"prompt": "x" * 101})
    E(port, "max_tokens over limit", "POST", C, {"prompt": "a", "max_tokens": 1001})
    for i, (path, body) in enumerate(BAD):
        E(port, "bad %d" % i, "POST", path, body, headers={"X-Session-Id": "victim"})
    E(port, "victim after", "GET", "/v1/sessions/victim")
    E(port, "metrics after", "GET", "/metrics")


BAD = [
    (C, b"{not json"), (C, b""), (C, b"[1, 2]"), (C, b'{"prompt": "a", "prompt": "b"}'),
    (C, b'{"prompt": "\xff\xfe"}'), (C, b'{"prompt": "a\\u0000b"}'),
    (C, b'{"prompt": "a", "max_tokens": 1e400}'),
    (C, {"prompt": 5}), (C, {"prompt": ["a", "b"]}), (C, {"prompt": [1, 256]}),
    (C, {"prompt": "a", "max_tokens": -1}), (C, {"prompt": "a", "max_tokens": "5"}),
    (C, {"prompt": "a", "max_tokens": 5.5}), (C, {"prompt": "a", "temperature": 2.5}),
    (C, {"prompt": "a", "top_p": 0}), (C, {"prompt": "a", "top_k": -3}),
    (C, {"prompt": "a", "min_p": 2}), (C, {"prompt": "a", "presence_penalty": 3}),
    (C, {"prompt": "a", "repetition_penalty": 0}), (C, {"prompt": "a", "seed": "x"}),
    (C, {"prompt": "a", "stop": 7}), (C, {"prompt": "a", "stop": [""]}),
    (C, {"prompt": "a", "stop": ["a"] * 17}), (C, {"prompt": "a", "stream": "yes"}),
    (C, {"prompt": "a", "stream_options": {"include_usage": True}}),
    (C, {"prompt": "a", "logprobs": 21}), (C, {"prompt": "a", "n": 17}),
    (C, {"prompt": "a", "best_of": 17}), (C, {"prompt": "a", "n": 3, "best_of": 2}),
    (C, {"prompt": "a", "echo": True, "stream": True}), (C, {"prompt": "a", "suffix": "z"}),
    (C, {"prompt": "a", "logit_bias": {"5": 101}}), (C, {"prompt": "a", "logit_bias": {"x5": 1}}),
    (C, {"prompt": "a", "logit_bias": {"100000": 1}}), (C, {"prompt": "a", "model": 5}),
    (C, {"prompt": "a", "model": "nope"}),
    (C, {"prompt": "a", "session_id": "bad id"}), (C, {"prompt": "a", "session_id": 12}),
    (C, {"messages": MSG}), (C, {"prompt": "a", "history": "full"}),
    (C, {"prompt": "", "max_tokens": 3}), (C, {"prompt": "a", "user": 5, "max_tokens": 2, "seed": 1}),
    (C, {"prompt": "a", "functions": [], "max_tokens": 2, "seed": 1}),
    (CH, {}), (CH, {"messages": []}), (CH, {"messages": "hi"}), (CH, {"messages": [5]}),
    (CH, {"messages": [{"content": "x"}]}), (CH, {"messages": [{"role": "tool", "content": "x"}]}),
    (CH, {"messages": [{"role": "user"}]}),
    (CH, {"messages": MSG + [{"role": "user", "content": [{"type": "image_url"}]}]}),
    (CH, {"messages": MSG, "logprobs": 1}), (CH, {"messages": MSG, "top_logprobs": 3}),
    (CH, {"messages": MSG, "max_completion_tokens": -2}),
    (CH, {"messages": MSG, "tools": [{"type": "function"}]}),
    (CH, {"messages": MSG, "response_format": {"type": "xml"}}),
    (CH, {"messages": MSG, "response_format": {"type": "json_schema"}}),
    (CH, {"messages": MSG, "response_format": {"type": "json_schema",
                                               "json_schema": {"name": "x",
                                                               "schema": {"type": "frob"}}}}),
    (CH, {"messages": MSG, "history": "sometimes"}),
]


def busy_daemon_exchanges(rec, d):
    """409 and 429: one slot and a queue of one, filled by streams held open."""
    port = d.port
    c1 = d.conn()
    c1.request("POST", C, body=json.dumps({"prompt": "go", "max_tokens": 10000000,
                                           "stream": True}).encode(),
               headers={"Content-Type": "application/json", "X-Session-Id": "busy"})
    r1 = c1.getresponse()
    assert r1.status == 200 and r1.read1(65536)  # generating
    rec.exchange(port, "409 busy completion", "POST", C, {"prompt": "x"},
                 headers={"X-Session-Id": "busy"})
    rec.exchange(port, "409 busy delete", "DELETE", "/v1/sessions/busy")
    rec.exchange(port, "409 busy fork", "POST", "/v1/sessions/busy/fork")
    rec.exchange(port, "409 busy export", "GET", "/v1/sessions/busy/state")
    c2 = d.conn()
    c2.request("POST", C, body=json.dumps({"prompt": "q", "max_tokens": 5,
                                           "stream": True}).encode(),
               headers={"Content-Type": "application/json"})
    r2 = c2.getresponse()
    assert r2.status == 200
    X.wait_until(lambda: X.metric(port, "xlserve_queue_depth") == 1, what="a queued stream")
    rec.exchange(port, "429", "POST", C, {"prompt": "c", "max_tokens": 5})
    c1.close()
    c2.close()


def record(binary=None):
    """The transcript (str) of a fresh daemon run of `binary` (default: $XLSERVE_BIN)."""
    if binary:
        os.environ["XLSERVE_BIN"] = binary
    out = []
    rec = Recorder(out)
    with tempfile.TemporaryDirectory(prefix="xl-transcript-") as tmp:
        model = X.write_tiny_model(os.path.join(tmp, "tiny"))
        d = X.Daemon(model, ["--max-body-bytes", "4096", "--max-prompt-tokens", "100",
                             "--max-tokens-limit", "1000", "--state-dir",
                             os.path.join(tmp, "state")], env=ENV)
        try:
            main_daemon_exchanges(rec, d.port)
        finally:
            assert d.stop() == 0, d.tail()
        d = X.Daemon(model, ["--max-running", "1", "--max-queue", "1",
                             "--max-tokens-limit", "10000000"], env=ENV)
        try:
            busy_daemon_exchanges(rec, d)
        finally:
            assert d.stop() == 0, d.tail()
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    text = record()
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)

"""Operations: the one option table (--help, --dump-config, precedence flag > env > file >
default, invalid values refused naming the option, the shipped config file generated from it),
logs (one JSON line per request, SIGHUP reopens the file), SIGTERM drains and exits 0."""
import json
import os
import signal
import socket
import subprocess
import time

import pytest

import xlharness as X

ROOT = os.environ.get("XL_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def serve(*args, env=None, timeout=20):
    e = {k: v for k, v in os.environ.items() if not k.startswith("XLSERVE_") or k == "XLSERVE_BIN"}
    e.update(env or {})
    return subprocess.run([X.xlserve_bin(), "serve", *args], capture_output=True, text=True,
                          env=e, timeout=timeout)


def dump(*args, env=None):
    r = serve(*args, "--dump-config", env=env)
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("#"):
            continue
        name, rest = line.split(" ", 1)
        value, origin = rest.rsplit("    # ", 1)
        out[name] = (value, origin)
    return out


def test_help_and_dump_cover_every_option():
    r = serve("--help")
    assert r.returncode == 0
    opts = dump()
    assert len(opts) >= 30
    for name in opts:
        assert "--" + name.replace("_", "-") in r.stdout, name
        assert "XLSERVE_" + name.upper() in r.stdout, name
    assert all(origin == "default" for _, origin in opts.values())


def test_shipped_config_is_the_template():
    r = serve("--config-template")
    assert r.returncode == 0
    with open(os.path.join(ROOT, "config", "xlserve.conf")) as f:
        assert f.read() == r.stdout, "regenerate: xlserve serve --config-template > config/xlserve.conf"
    # every option appears, commented out, with its default
    opts = dump()
    for name, (value, _) in opts.items():
        if name != "model":
            assert "\n#%s %s\n" % (name, value) in r.stdout, name
    # and the shipped file loads
    assert dump("--config", os.path.join(ROOT, "config", "xlserve.conf"))["port"] == ("8080", "default")


def test_precedence_flag_env_file_default(tmp_path):
    conf = tmp_path / "x.conf"
    conf.write_text("# comment\nport 1111\nmax_batch 7\nworkers 2\n"
                    "chat_user_prefix \"Q: \"\naccess_log off\n")
    opts = dump("--config", str(conf), "--workers", "4",
                env={"XLSERVE_MAX_BATCH": "8", "XLSERVE_WORKERS": "3"})
    assert opts["port"] == ("1111", "file")
    assert opts["max_batch"] == ("8", "env")
    assert opts["workers"] == ("4", "flag")
    assert opts["chat_user_prefix"] == ('"Q: "', "file")
    assert opts["access_log"] == ("false", "file")
    assert opts["max_queue"] == ("1024", "default")
    # XLSERVE_CONFIG names the file; --no-NAME and --NAME=VALUE forms
    opts = dump("--no-access-log", "--idle-timeout=9", env={"XLSERVE_CONFIG": str(conf)})
    assert opts["port"] == ("1111", "file") and opts["idle_timeout"] == ("9", "flag")
    assert opts["access_log"] == ("false", "flag")
    # keys never appear in a dump
    assert dump("--api-keys", "sekrit")["api_keys"][0] == '"<redacted>"'


@pytest.mark.parametrize("args,env,conf,option", [
    (["--max-batch", "0"], {}, None, "max_batch"),
    (["--port", "70000"], {}, None, "port"),
    (["--workers", "two"], {}, None, "workers"),
    ([], {"XLSERVE_WORKERS": "abc"}, None, "workers"),
    ([], {"XLSERVE_ACCESS_LOG": "maybe"}, None, "access_log"),
    ([], {}, "bogus_option 1\n", "bogus_option"),
    ([], {}, "max_queue -5\n", "max_queue"),
    ([], {}, "chat_stop \"\\q\"\n", "chat_stop"),
    (["--path-prefix", "noslash"], {}, None, "path_prefix"),
    (["--default-max-tokens", "50", "--max-tokens-limit", "10"], {}, None, "default_max_tokens"),
    (["--no-such-flag", "1"], {}, None, "no-such-flag"),
    (["--trusted-proxies", "1.2.3"], {}, None, "trusted_proxies"),
    (["--api-key-file", "/nonexistent/keys"], {}, None, "api_key_file"),
    (["--host", "not-an-address", "--port", "0"], {}, None, "host"),
    (["--cpu", "sse9"], {}, None, "option cpu: unknown CPU path 'sse9'"),
    ([], {"XLSERVE_CPU": "neon" if os.uname().machine not in ("aarch64", "arm64") else "avx2"},
     None, "this CPU runs: "),
])
def test_invalid_values_are_refused_naming_the_option(tmp_path, tiny_model, args, env, conf, option):
    if conf is not None:
        p = tmp_path / "bad.conf"
        p.write_text(conf)
        args = ["--config", str(p)] + args
    r = serve("--model", tiny_model, *args, env=env)
    assert r.returncode in (1, 2), r
    assert option in r.stderr, r.stderr


def test_ready_line_names_the_cpu_path(start_daemon, tiny_model):
    """The ready log line names the kernel family in use (the forced one, or auto's choice: the
    first path `xlserve info` lists as runnable), then OpenBLAS's core (the one info names)."""
    d = start_daemon(tiny_model, "--cpu", "portable")
    ev = d.wait_log(lambda o: o.get("event") == "ready")
    assert "; cpu portable; blas core " in ev["msg"], ev
    info = subprocess.run([X.xlserve_bin(), "info", "--model", tiny_model], capture_output=True,
                          text=True, timeout=60, check=True,
                          env={k: v for k, v in os.environ.items() if k != "XLSERVE_CPU"}).stdout
    best = info.split("this CPU runs: ")[1].split(",")[0].strip(" )\n")
    d2 = start_daemon(tiny_model, env={"XLSERVE_CPU": "auto"})
    ev2 = d2.wait_log(lambda o: o.get("event") == "ready")
    assert "; cpu " + best + "; blas core " in ev2["msg"], (ev2, info)
    core = info.split("blas core")[1].split()[0]
    assert ev2["msg"].split("; blas core ")[1].split()[0] == core, (ev2, info)


def test_missing_model_fails_at_start(tmp_path):
    r = serve("--model", str(tmp_path / "nomodel"), "--port", "0")
    assert r.returncode == 1
    assert "model" in r.stderr and "nomodel" in r.stderr


def test_request_log_and_sighup_reopen(start_daemon, tiny_model, tmp_path):
    log = tmp_path / "xl.log"
    d = start_daemon(tiny_model, "--log-file", str(log), port=X.free_port())
    st, h, b = X.post_json(d.port, "/v1/completions", {"prompt": "hi", "max_tokens": 3},
                           {"X-Session-Id": "logged", "X-Request-Id": "client-chosen"})
    assert st == 200

    def lines(p):
        return [json.loads(l) for l in p.read_text().splitlines()] if p.exists() else []

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        reqs = [l for l in lines(log) if l.get("path") == "/v1/completions"]
        if reqs:
            break
        time.sleep(0.02)
    req = reqs[0]
    for k in ["ts", "request_id", "session", "status", "tokens_in", "tokens_out", "queue_ms",
              "ttft_ms", "duration_ms"]:
        assert k in req, k
    assert req["session"] == "logged" and req["status"] == 200 and req["tokens_in"] == 2
    assert req["tokens_out"] == 3 and req["ttft_ms"] >= 0 and req["queue_ms"] >= 0
    # not from a trusted proxy: the client's X-Request-Id is not trusted, ours is echoed
    assert req["request_id"] == h["x-request-id"] != "client-chosen"
    os.rename(log, str(log) + ".1")
    d.signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not lines(log):
        X.request(d.port, "GET", "/health")
        time.sleep(0.05)
    assert any(l.get("event") == "sighup" or l.get("path") == "/health" for l in lines(log))


def test_every_log_line_has_ts_and_level(start_daemon, tiny_model):
    """From the first line (`listening`, with the bound port) to `exit`, every line is JSON with
    a timestamp; every line but the per-request ones has a level."""
    d = start_daemon(tiny_model)
    assert X.request(d.port, "GET", "/health")[0] == 200
    assert d.stop() == 0
    lines = list(d.lines)
    assert not [l for l in lines if "raw" in l], d.tail()
    first = lines[0]
    assert first["event"] == "listening" and first["level"] == "info", first
    assert first["port"] == d.port and first["host"] == "127.0.0.1" and first["version"]
    assert str(d.port) in first["msg"]
    for l in lines:
        assert "ts" in l and l["ts"].endswith("Z"), l
        assert l.get("event") == "request" or l.get("level") in ("info", "warn", "error"), l
    assert lines[-1]["event"] == "exit"


def test_sigterm_drains_streams_then_exits_0(start_daemon, medium_model):
    # The drain allows far longer than the stream needs on the slowest build (2500 tokens take
    # about 30 s under ThreadSanitizer), so the stream ends by its length, never by the deadline.
    d = start_daemon(medium_model, "--drain-timeout", "600")
    keep = d.conn()
    keep.request("GET", "/health")
    assert keep.getresponse().read()
    c = d.conn()
    c.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": "a long story", "max_tokens": 2500, "stream": True}),
        headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200 and r.read1(65536)
    d.signal(signal.SIGTERM)
    draining = d.wait_log(lambda o: o.get("event") == "draining")
    assert "1 requests in progress" in draining["msg"]  # the stream was still running
    # the listening socket is closed at once
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", d.port), timeout=2).close()
    # an open keep-alive connection gets 503 and is closed
    keep.request("GET", "/health")
    kr = keep.getresponse()
    assert kr.status == 503 and json.loads(kr.read()) == {"status": "draining"}
    assert kr.getheader("Connection") == "close"
    # the running stream finishes normally
    ev = X.read_sse(r, deadline_s=600)
    chunks = X.sse_json(ev)
    assert [e for _, e in ev][-1] == "[DONE]"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert d.wait_exit(30) == 0


def test_sigterm_deadline_cancels_streams(start_daemon, tiny_model):
    d = start_daemon(tiny_model, "--drain-timeout", "1", "--max-tokens-limit", "10000000")
    c = d.conn()
    c.request("POST", "/v1/chat/completions", body=json.dumps(
        {"messages": [{"role": "user", "content": "go"}], "max_tokens": 10000000,
         "stream": True}), headers={"Content-Type": "application/json", "X-Session-Id": "drain"})
    r = c.getresponse()
    assert r.status == 200 and r.read1(65536)
    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    ev = X.read_sse(r, deadline_s=30)
    data = [e for _, e in ev]
    assert data[-1] == "[DONE]"
    err = json.loads(data[-2])["error"]
    assert err["code"] == "shutting_down"
    assert d.wait_exit(30) == 0
    assert time.monotonic() - t0 < 10

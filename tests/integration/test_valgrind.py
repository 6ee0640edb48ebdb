"""The daemon under valgrind (memcheck): a session's turns, a stream, a fork, bad input, a
delete, then SIGTERM. No memory error and nothing definitely lost. Runs on the release build
(an ASan build cannot run under valgrind) when valgrind is installed."""
import shutil

import pytest

import xlharness

pytestmark = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")


def test_daemon_is_valgrind_clean(tiny_model, tmp_path):
    binary = xlharness.xlserve_bin()
    if xlharness.binary_sanitizer(binary):
        pytest.skip("a sanitizer build (ASan, TSan) cannot run under valgrind")
    log = tmp_path / "valgrind.log"
    wrapper = ["valgrind", "--quiet", "--error-exitcode=99", "--leak-check=full",
               "--errors-for-leak-kinds=definite", f"--log-file={log}"]
    d = xlharness.Daemon(tiny_model, ["--workers", "2"], wrapper=wrapper, timeout=120)
    try:
        sid = {"X-Session-Id": "vg-1"}
        for text in ("Good morning.", "And your sister?"):
            r = xlharness.post_json(d.port, "/v1/chat/completions",
                                    {"messages": [{"role": "user", "content": text}],
                                     "max_tokens": 8, "seed": 1}, headers=sid)
            assert r[0] == 200, r
        status, _, events = xlharness.stream(d.port, "/v1/completions",
                                             {"prompt": "Emma", "max_tokens": 8, "stream": True})
        assert status == 200 and events[-1][1] == "[DONE]"
        assert xlharness.request(d.port, "POST", "/v1/sessions/vg-1/fork")[0] == 201
        assert xlharness.post_json(d.port, "/v1/completions", {"prompt": 5})[0] == 400
        assert xlharness.request(d.port, "DELETE", "/v1/sessions/vg-1")[0] == 200
    finally:
        code = d.stop()
    report = log.read_text()
    assert code == 0, report + "\n" + d.tail()
    assert "ERROR SUMMARY" not in report or "ERROR SUMMARY: 0 errors" in report, report

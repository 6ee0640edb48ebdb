"""A daemon that prints a sanitizer report fails its test, and pytest's output shows the report
from its first line (UBSan's `runtime error`) with the symbolized stack, not only a log file.

End to end: an inner pytest run (a subprocess, with this suite's fixtures) starts the daemon
behind a wrapper that first runs a small program with a planted undefined shift, built here with
-fsanitize=undefined; the report lands on the daemon's stderr as a real one would. The inner
test itself passes; the suite's no_sanitizer_report fixture must fail it with the report."""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

PLANTED = r"""
static volatile int shift_base = 1, shift_by = 40;
static int planted_shift(void) { return shift_base << shift_by; }
int main(void) { return planted_shift() == 12345; }
"""

INNER = r"""
import sys
sys.path.insert(0, %(here)r)
import xlharness as X
from xlfixtures import no_sanitizer_report, start_daemon, tiny_model  # noqa: F401


def test_daemon_with_a_report(start_daemon, tiny_model):
    d = start_daemon(tiny_model, wrapper=["sh", "-c", '%(planted)s; exec "$@"', "sh"])
    assert X.request(d.port, "GET", "/health")[0] == 200
"""


def test_daemon_report_is_shown_in_the_test_output(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    src, planted = tmp_path / "planted.c", tmp_path / "planted"
    src.write_text(PLANTED)
    subprocess.run([cc, "-g", "-O0", "-fno-omit-frame-pointer", "-fsanitize=undefined", "-o",
                    str(planted), str(src)], check=True, timeout=120)
    inner = tmp_path / "inner" / "test_inner.py"
    inner.parent.mkdir()
    inner.write_text(INNER % {"here": HERE, "planted": str(planted)})
    env = dict(os.environ)
    # the options tools/test.sh sets (stacks on; llvm-symbolizer is found on PATH)
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(inner)], cwd=str(inner.parent), env=env, capture_output=True,
                       text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out  # the inner test is failed by the report
    assert "1 passed, 1 error" in out, out  # at its teardown, by the fixture
    assert "sanitizer report on the stderr of" in out, out
    assert "planted.c:3:" in out and "runtime error: shift exponent 40" in out, out
    # the stack, symbolized: function and file:line
    assert "in planted_shift" in out and "planted.c:3" in out.split("in planted_shift", 1)[1], out

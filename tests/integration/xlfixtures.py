"""Pytest fixtures shared by every suite that runs the real daemon (integration, deploy, web):
tiny random byte-level models and a daemon starter that insists on a clean exit. A suite's
conftest.py imports the ones it uses (`from xlfixtures import tiny_model, start_daemon`), and
no_sanitizer_report, which runs around every test of the suite."""
import pytest

import xlharness


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """2 layers, d_model 32, mem_len 64: about 40k tokens/s, for functional tests."""
    return xlharness.write_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def medium_model(tmp_path_factory):
    """4 layers, d_model 128, mem_len 128: a few thousand tokens/s, so a stream takes visible
    time (timing tests)."""
    return xlharness.write_tiny_model(tmp_path_factory.mktemp("models") / "medium", d_model=128,
                                      d_embed=128, n_head=4, d_head=32, d_inner=512, n_layer=4,
                                      mem_len=128)


@pytest.fixture
def start_daemon():
    """Starts daemons with given options; stops them at the end expecting exit 0 (which also
    means no leak: LeakSanitizer exits non-zero)."""
    started = []

    def start(model, *args, **kw):
        d = xlharness.Daemon(model, list(args), **kw)
        started.append(d)
        return d

    yield start
    codes = [(d.stop(), d) for d in started]
    for code, d in codes:
        assert code == 0, d.tail()


@pytest.fixture(autouse=True)
def no_sanitizer_report():
    """After each test: a daemon it started that printed a sanitizer report (ASan, LSan, UBSan,
    TSan) fails the test with the report (its first line and the symbolized stack), whether or
    not the test itself looked at the daemon's exit status."""
    first = len(xlharness.Daemon.started)
    yield
    daemons = xlharness.Daemon.started[first:]
    del xlharness.Daemon.started[first:]
    for d in daemons:
        if d.proc.poll() is not None:
            d.reader.join(timeout=5)  # the report's last lines
        report = d.sanitizer_report()
        if report:
            pytest.fail("sanitizer report on the stderr of %s:\n%s" % (
                " ".join(d.proc.args), report), pytrace=False)

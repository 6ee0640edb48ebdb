"""Fixtures of the integration suite: tiny random byte-level models written with the shared numpy
writer, and the real daemon (`xlserve serve`, from $XLSERVE_BIN) on a loopback port."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xlharness  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """2 layers, d_model 32, mem_len 64: about 40k tokens/s, for functional tests."""
    return xlharness.write_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def medium_model(tmp_path_factory):
    """4 layers, d_model 128, mem_len 128: a few thousand tokens/s, for timing tests."""
    return xlharness.write_tiny_model(tmp_path_factory.mktemp("models") / "medium", d_model=128,
                                      d_embed=128, n_head=4, d_head=32, d_inner=512, n_layer=4,
                                      mem_len=128)


@pytest.fixture(scope="module")
def daemon(tiny_model):
    """A shared daemon for tests that do not depend on its configuration."""
    d = xlharness.Daemon(tiny_model, ["--max-tokens-limit", "1000000"])
    yield d
    assert d.stop() == 0, d.tail()


@pytest.fixture
def start_daemon():
    """Starts daemons with given options; stops them (expecting exit 0) at the end."""
    started = []

    def start(model, *args, **kw):
        d = xlharness.Daemon(model, list(args), **kw)
        started.append(d)
        return d

    yield start
    codes = [(d.stop(), d) for d in started]
    for code, d in codes:  # 0 also means: no leak (LeakSanitizer exits non-zero)
        assert code == 0, d.tail()

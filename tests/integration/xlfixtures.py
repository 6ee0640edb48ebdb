"""Pytest fixtures shared by every suite that runs the real daemon (integration, deploy, web):
tiny random byte-level models and a daemon starter that insists on a clean exit. A suite's
conftest.py imports the ones it uses (`from xlfixtures import tiny_model, start_daemon`)."""
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

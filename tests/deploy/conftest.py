"""Fixtures of the deployment suite (nginx in front, the systemd notify protocol and unit,
`cmake --install`, the Docker files). Reuses the integration suite's harness (xlharness: the
tiny random model, the daemon on a loopback port) and adds nginx and the build/install helpers (deployharness)."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import xlharness  # noqa: E402
from deployharness import build_cache, cmake_install  # noqa: E402


@pytest.fixture(scope="session")
def installed(tmp_path_factory):
    """This build installed with `cmake --install` into a DESTDIR: (destdir, prefix)."""
    dest = tmp_path_factory.mktemp("destdir")
    cmake_install(dest)
    return str(dest), build_cache("CMAKE_INSTALL_PREFIX")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """2 layers, d_model 32: fast, for functional tests."""
    return xlharness.write_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def medium_model(tmp_path_factory):
    """4 layers, d_model 128: a few thousand tokens/s, so a stream takes visible time."""
    return xlharness.write_tiny_model(tmp_path_factory.mktemp("models") / "medium", d_model=128,
                                      d_embed=128, n_head=4, d_head=32, d_inner=512, n_layer=4,
                                      mem_len=128)


@pytest.fixture
def start_daemon():
    """Starts daemons with given options; stops them (expecting exit 0: no leak under LSan)."""
    started = []

    def start(model, *args, **kw):
        d = xlharness.Daemon(model, list(args), **kw)
        started.append(d)
        return d

    yield start
    codes = [(d.stop(), d) for d in started]
    for code, d in codes:
        assert code == 0, d.tail()

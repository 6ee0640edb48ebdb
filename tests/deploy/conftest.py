"""Fixtures of the deployment suite (nginx in front, the systemd notify protocol and unit,
`cmake --install`, the Docker files). Reuses the integration suite's harness (xlharness: the
tiny random model, the daemon on a loopback port) and adds nginx and the build/install helpers (deployharness)."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from xlfixtures import (medium_model, no_sanitizer_report, start_daemon,  # noqa: E402,F401
                        tiny_model)
from deployharness import build_cache, cmake_install  # noqa: E402


@pytest.fixture(scope="session")
def installed(tmp_path_factory):
    """This build installed with `cmake --install` into a DESTDIR: (destdir, prefix)."""
    dest = tmp_path_factory.mktemp("destdir")
    cmake_install(dest)
    return str(dest), build_cache("CMAKE_INSTALL_PREFIX")



"""Fixtures of the integration suite: tiny random byte-level models written with the shared numpy
writer, and the real daemon (`xlserve serve`, from $XLSERVE_BIN) on a loopback port."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xlharness  # noqa: E402
from xlfixtures import (medium_model, no_sanitizer_report, start_daemon,  # noqa: E402,F401
                        tiny_model)


@pytest.fixture(scope="module")
def daemon(tiny_model):
    """A shared daemon for tests that do not depend on its configuration."""
    d = xlharness.Daemon(tiny_model, ["--max-tokens-limit", "1000000"])
    yield d
    assert d.stop() == 0, d.tail()

"""Fixtures of the web suite (the chat page at /): the integration suite's harness (a tiny
random byte-level model, the real daemon on a loopback port) and one headless Chromium for the
module, driven over the DevTools pipe (cdp.py). Browser tests skip when Chromium is not
installed (tools/install-deps.sh installs Debian's `chromium`); set XL_REQUIRE_CHROMIUM=1 to
make that a failure instead. XL_WEB_SCREENSHOTS=DIR saves screenshots of the page there."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import cdp  # noqa: E402
from xlfixtures import no_sanitizer_report, start_daemon, tiny_model  # noqa: E402,F401

ROOT = os.environ.get("XL_SOURCE_DIR", os.path.join(HERE, "..", ".."))


@pytest.fixture(scope="module")
def browser():
    if not cdp.chromium_binary():
        if os.environ.get("XL_REQUIRE_CHROMIUM") == "1":
            pytest.fail("chromium not found and XL_REQUIRE_CHROMIUM=1")
        pytest.skip("chromium not installed (tools/install-deps.sh installs it)")
    b = cdp.Browser()
    yield b
    b.close()


@pytest.fixture
def page(browser):
    """A tab in a fresh browser context (empty localStorage), desktop size."""
    p = browser.page()
    yield p
    p.close()


@pytest.fixture
def shots():
    """shots(page, name): a screenshot into $XL_WEB_SCREENSHOTS, when set."""
    d = os.environ.get("XL_WEB_SCREENSHOTS")

    def take(p, name):
        if d:
            os.makedirs(d, exist_ok=True)
            p.screenshot(os.path.join(d, name + ".png"))
    return take

"""The seeded HTTP transcript (record.py) of this build equals the one committed beside it,
byte for byte: a change that was meant to keep the daemon's behaviour kept it.

To accept an intended change of behaviour, record again and commit the new file with the change:
    XLSERVE_BIN=build/xlserve PYTHONPATH=tools python3 tests/transcript/record.py \\
        tests/transcript/transcript.txt
"""
import difflib
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import record  # noqa: E402
import xlharness  # noqa: E402


def test_transcript_is_unchanged():
    if xlharness.binary_sanitizer():
        pytest.skip("a sanitizer build: its unoptimised arithmetic may round differently")
    with open(os.path.join(HERE, "transcript.txt"), encoding="utf-8") as f:
        want = f.read()
    got = record.record()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                            "transcript.txt (committed)", "this build", n=2))
        pytest.fail("the transcript changed:\n" + diff[:20000], pytrace=False)

"""conftest.py: the tokenizer suite's agreement table (lines equal / total, per check and per
corpus source), printed at the end of the run and written to $XL_BUILD_DIR/
tokenizer_agreement.txt when that is set."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tok_results import AGREEMENT  # noqa: E402


def pytest_terminal_summary(terminalreporter):
    if not AGREEMENT:
        return
    lines = ["tokenizer agreement (lines equal / total)",
             f"{'check':44s} {'source':10s} {'equal':>7s} / {'total':<7s}"]
    for check, source, eq, total in AGREEMENT:
        flag = "" if eq == total else "  DIFFER"
        lines.append(f"{check:44s} {source:10s} {eq:7d} / {total:<7d}{flag}")
    terminalreporter.write_sep("=", "tokenizer agreement")
    for line in lines:
        terminalreporter.write_line(line)
    build = os.environ.get("XL_BUILD_DIR")
    if build and os.path.isdir(build):
        try:
            with open(os.path.join(build, "tokenizer_agreement.txt"), "w") as f:
                f.write("\n".join(lines) + "\n")
        except OSError:
            pass

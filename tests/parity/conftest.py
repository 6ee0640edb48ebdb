"""conftest.py: session fixtures of the parity suite (the generated models) and the summary
table of max |engine - reference| per configuration, printed at the end of the run and written
to $XL_BUILD_DIR/parity_results.txt (parity_results.PATH.txt when XLSERVE_CPU forces a kernel
family) when that is set. With XLSERVE_CPU naming a family this CPU cannot run, every test is
skipped with "cpu path not runnable here" (ctest reports the run as skipped).
"""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import make_random_model as gen  # noqa: E402
from parity_util import RESULTS, SEED  # noqa: E402


CPU = os.environ.get("XLSERVE_CPU", "")


def pytest_collection_modifyitems(config, items):
    """Skips the suite when XLSERVE_CPU names a family this CPU cannot run (an unknown name
    stays an error: the engine runs refuse it)."""
    if not CPU or CPU == "auto" or not os.environ.get("XLSERVE_BIN"):
        return
    r = subprocess.run([os.environ["XLSERVE_BIN"], "info", "--cpu", CPU],
                       capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                                            if k != "XLSERVE_CPU"})
    if r.returncode != 0 and "unknown CPU path" not in r.stderr:
        mark = pytest.mark.skip(reason=f"cpu path not runnable here: {r.stderr.strip()}")
        for item in items:
            item.add_marker(mark)
    else:
        print(f"parity on cpu path {CPU}")


@pytest.fixture(scope="session")
def model_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("parity_models"))


@pytest.fixture(scope="session")
def models(model_root):
    """{config name: model dir}, every CONFIGS entry written once per session."""
    out = {}
    for name in gen.CONFIGS:
        d = os.path.join(model_root, name)
        gen.write_model(name, d, seed=SEED)
        out[name] = d
    return out


def pytest_terminal_summary(terminalreporter):
    if not RESULTS:
        return
    lines = ["parity: max |engine - reference| of natural-log NLL (tolerance 1e-4), cpu path "
             + (CPU or "auto"),
             f"{'configuration':26s} {'check':38s} {'tokens':>6s} {'segs':>5s} {'max diff':>10s}"]
    worst = 0.0
    for cfg, check, n, segs, diff, tol in RESULTS:
        flag = "" if diff <= tol else "  FAIL"
        lines.append(f"{cfg:26s} {check:38s} {n:6d} {segs:5d} {diff:10.3e}{flag}")
        worst = max(worst, diff)
    lines.append(f"overall max diff: {worst:.3e} over {len(RESULTS)} comparisons")
    per_cfg = {}
    for cfg, _, _, _, diff, _ in RESULTS:
        per_cfg[cfg] = max(per_cfg.get(cfg, 0.0), diff)
    lines.append("per configuration (max over its checks): " +
                 ", ".join(f"{c} {d:.2e}" for c, d in per_cfg.items()))
    terminalreporter.write_sep("=", "parity summary")
    for line in lines:
        terminalreporter.write_line(line)
    build = os.environ.get("XL_BUILD_DIR")
    if build and os.path.isdir(build):
        try:
            name = f"parity_results.{CPU}.txt" if CPU else "parity_results.txt"
            with open(os.path.join(build, name), "w") as f:
                f.write("\n".join(lines) + "\n")
        except OSError:
            pass

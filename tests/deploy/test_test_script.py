"""tools/test.sh's last line says what ran: the stages that passed, those skipped with the
reason, or the stage that failed and its exit status. Checked with stages that build nothing:
the fuzz stage under XL_SKIP_FUZZ=1 and small extra-stage scripts (XL_EXTRA_STAGES) that pass,
cannot run here (exit 77) or fail."""
import os
import subprocess

from deployharness import ROOT

# variables of an outer tools/test.sh run that would change what the inner one does
OUTER = ("RUN", "XL_SKIP_FUZZ", "XL_EXTRA_STAGES", "XL_FUZZ_SECONDS", "PYTEST_ADDOPTS",
         "XL_TEST_RUN")


def run_test_sh(*args, extra=(), skip_fuzz=False):
    env = {k: v for k, v in os.environ.items() if k not in OUTER}
    if extra:
        env["XL_EXTRA_STAGES"] = " ".join(str(e) for e in extra)
    if skip_fuzz:
        env["XL_SKIP_FUZZ"] = "1"
    r = subprocess.run(["bash", os.path.join(ROOT, "tools", "test.sh"), *args], env=env,
                       capture_output=True, text=True, timeout=120)
    lines = r.stdout.strip().splitlines()
    return r.returncode, lines[-1] if lines else "", r.stdout + r.stderr


def stage_script(tmp_path, name, rc):
    p = tmp_path / (name + ".sh")
    p.write_text("echo '%s here'\nexit %d\n" % (name, rc))
    return p


def test_skipped_fuzz_stage_is_named_skipped_not_passed():
    rc, last, out = run_test_sh("fuzz", skip_fuzz=True)
    assert rc == 0, out
    assert last == "=== stages passed: none; skipped: fuzz (XL_SKIP_FUZZ=1)", out


def test_last_line_names_passed_and_skipped_stages(tmp_path):
    ok, cannot = stage_script(tmp_path, "ok", 0), stage_script(tmp_path, "cannot", 77)
    rc, last, out = run_test_sh("ok", "cannot", extra=(ok, cannot))
    assert rc == 0, out
    assert "ok here" in out and "cannot here" in out
    assert last == "=== stages passed: ok; skipped: cannot (cannot run here, see above)", out


def test_last_line_names_the_failed_stage(tmp_path):
    ok, bad, later = (stage_script(tmp_path, "ok", 0), stage_script(tmp_path, "bad", 3),
                      stage_script(tmp_path, "later", 0))
    rc, last, out = run_test_sh("ok", "bad", "later", extra=(ok, bad, later))
    assert rc == 3, out
    assert last == "=== FAILED in stage bad (exit 3); passed before it: ok", out
    assert "later here" not in out  # the run stops at the failed stage


def test_unknown_stage_is_refused():
    rc, _, out = run_test_sh("nosuchstage")
    assert rc == 2 and "no stage nosuchstage" in out, out

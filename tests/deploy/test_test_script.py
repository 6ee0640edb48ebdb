"""tools/test.sh's last line says what ran: the stages that passed, those skipped with the
reason ("NAME skipped: REASON", the reason being a stage script's last line when it exits 77),
or the stage that failed and its exit status; a stage that is required (XL_REQUIRE_DOCKER=1,
XL_REQUIRE_STAGES=...) and cannot run fails the run. Checked with stages that build nothing:
the fuzz stage under XL_SKIP_FUZZ=1, small extra-stage scripts (XL_EXTRA_STAGES), the real
container stage where dockerd cannot start (stub programs first on PATH), and a stub ctest
that shows what REPEAT passes to it."""
import os
import subprocess

from deployharness import ROOT

# variables of an outer tools/test.sh run (or of CI) that would change what the inner one does
OUTER = ("RUN", "XL_SKIP_FUZZ", "XL_EXTRA_STAGES", "XL_FUZZ_SECONDS", "PYTEST_ADDOPTS",
         "XL_TEST_RUN", "REPEAT", "XL_REQUIRE_DOCKER", "XL_REQUIRE_ARM64", "XL_REQUIRE_STAGES",
         "XL_DOCKERD", "XL_LOAD_SECONDS")


def run_test_sh(*args, extra=(), skip_fuzz=False, env_add=None, path_first=None):
    env = {k: v for k, v in os.environ.items() if k not in OUTER}
    if extra:
        env["XL_EXTRA_STAGES"] = " ".join(str(e) for e in extra)
    if skip_fuzz:
        env["XL_SKIP_FUZZ"] = "1"
    if path_first:
        env["PATH"] = str(path_first) + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    env.update(env_add or {})
    r = subprocess.run(["bash", os.path.join(ROOT, "tools", "test.sh"), *args], env=env,
                       capture_output=True, text=True, timeout=120)
    lines = r.stdout.strip().splitlines()
    return r.returncode, lines[-1] if lines else "", r.stdout + r.stderr


def stage_script(tmp_path, name, rc, last=None):
    p = tmp_path / (name + ".sh")
    p.write_text("echo '%s here'\n%sexit %d\n" % (name, "echo '%s'\n" % last if last else "", rc))
    return p


def stubs(tmp_path, programs):
    """A directory of stub programs (name -> shell script body), for the front of PATH."""
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    for name, body in programs.items():
        p = d / name
        p.write_text("#!/bin/sh\n" + body)
        p.chmod(0o755)
    return d


def test_skipped_fuzz_stage_is_named_skipped_not_passed():
    rc, last, out = run_test_sh("fuzz", skip_fuzz=True)
    assert rc == 0, out
    assert last == "=== stages passed: none; fuzz skipped: XL_SKIP_FUZZ=1", out


def test_last_line_names_passed_and_skipped_stages_with_the_reason(tmp_path):
    ok = stage_script(tmp_path, "ok", 0)
    cannot = stage_script(tmp_path, "cannot", 77, last="no engine here: cgroups missing")
    rc, last, out = run_test_sh("ok", "cannot", extra=(ok, cannot))
    assert rc == 0, out
    assert "ok here" in out and "cannot here" in out
    assert last == "=== stages passed: ok; cannot skipped: no engine here: cgroups missing", out


def test_a_required_stage_that_cannot_run_fails(tmp_path):
    ok = stage_script(tmp_path, "ok", 0)
    cannot = stage_script(tmp_path, "cannot", 77, last="no engine here: cgroups missing")
    later = stage_script(tmp_path, "later", 0)
    rc, last, out = run_test_sh("ok", "cannot", "later", extra=(ok, cannot, later),
                                env_add={"XL_REQUIRE_STAGES": "other cannot"})
    assert rc == 77, out
    assert last == ("=== FAILED in stage cannot (exit 77: cannot run here, required by "
                    "XL_REQUIRE_STAGES: no engine here: cgroups missing); passed before it: ok"), out
    assert "later here" not in out
    # required: another stage, not this one
    rc, last, out = run_test_sh("cannot", extra=(cannot,),
                                env_add={"XL_REQUIRE_STAGES": "cannotx", "XL_REQUIRE_DOCKER": "1"})
    assert rc == 0 and last.endswith("cannot skipped: no engine here: cgroups missing"), out


def test_last_line_names_the_failed_stage(tmp_path):
    ok, bad, later = (stage_script(tmp_path, "ok", 0), stage_script(tmp_path, "bad", 3),
                      stage_script(tmp_path, "later", 0))
    rc, last, out = run_test_sh("ok", "bad", "later", extra=(ok, bad, later))
    assert rc == 3, out
    assert last == "=== FAILED in stage bad (exit 3); passed before it: ok", out
    assert "later here" not in out  # the run stops at the failed stage


def test_container_stage_where_dockerd_cannot_start(tmp_path):
    """The real tools/test-docker.sh, with no engine answering (a docker client stub that
    fails) and a dockerd that exits at its start as Debian's does without cgroups: skipped with
    dockerd's reason; failed under XL_REQUIRE_DOCKER=1. Not root: skipped for that reason."""
    bindir = stubs(tmp_path, {
        "docker": "exit 1\n", "docker-compose": "exit 1\n", "debootstrap": "exit 1\n",
        "dockerd": "echo 'time=\"2026-01-01T00:00:00Z\" level=info msg=\"Starting up\"'\n"
                   "echo \"failed to start daemon: Devices cgroup isn't mounted\" >&2\n"
                   "exit 1\n"})
    if os.geteuid() == 0:
        reason = ("dockerd cannot start here (exit 1): failed to start daemon: Devices cgroup "
                  "isn't mounted")
    else:
        reason = ("not root (the container stage installs packages, starts dockerd, runs "
                  "debootstrap)")
    rc, last, out = run_test_sh("test-docker", path_first=bindir)
    assert rc == 0, out
    assert last == "=== stages passed: none; test-docker skipped: " + reason, out
    rc, last, out = run_test_sh("test-docker", path_first=bindir,
                                env_add={"XL_REQUIRE_DOCKER": "1"})
    assert rc == 77, out
    assert last == ("=== FAILED in stage test-docker (exit 77: cannot run here, required by "
                    "XL_REQUIRE_DOCKER=1: " + reason + "); passed before it: none"), out


def test_repeat_runs_each_test_until_its_first_failure(tmp_path):
    """REPEAT=N reaches ctest as --repeat until-fail:N (stub cmake and ctest: nothing built)."""
    bindir = stubs(tmp_path, {
        "cmake": "exit 0\n",
        "ctest": 'case " $* " in *" -N "*) echo "  Test #1: unit.test_stub"; exit 0 ;; esac\n'
                 'echo "ctest args: $*"\n'})
    rc, last, out = run_test_sh("gcc", path_first=bindir, env_add={"REPEAT": "7"})
    assert rc == 0, out
    assert "--repeat until-fail:7" in out and "unit\\.test_stub" in out, out
    assert last == "=== stages passed: gcc", out
    for bad in ("0", "x", "-3"):
        rc, _, out = run_test_sh("gcc", path_first=bindir, env_add={"REPEAT": bad})
        assert rc == 2 and "REPEAT must be a positive number" in out, out


def test_unknown_stage_is_refused():
    rc, _, out = run_test_sh("nosuchstage")
    assert rc == 2 and "no stage nosuchstage" in out, out

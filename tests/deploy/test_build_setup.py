"""What a user meets first: a default cmake configure does not turn warnings into errors (a new
compiler's warning must not stop a user's build; the developers' and CI's builds turn them on
with -DXL_WERROR=ON), and the quick start installs only what building and running need."""
import glob
import os
import re
import subprocess

from deployharness import ROOT

# packages only the tests need: the quick start's first command must not install them
TEST_ONLY = {"python3-torch", "python3-numpy", "python3-pytest", "clang", "llvm", "valgrind",
             "nginx-light", "chromium", "strace"}


def configure(tmp_path, *args):
    build = tmp_path / "b"
    r = subprocess.run(["cmake", "-S", ROOT, "-B", str(build), *args], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    flags = ""
    for f in glob.glob(str(build / "**" / "flags.make"), recursive=True):
        with open(f) as fh:
            flags += fh.read()
    assert "C_FLAGS" in flags
    return flags


def test_default_build_has_no_werror(tmp_path):
    assert "-Werror" not in configure(tmp_path, "-DCMAKE_BUILD_TYPE=Release")


def test_xl_werror_turns_warnings_into_errors(tmp_path):
    flags = configure(tmp_path, "-DCMAKE_BUILD_TYPE=Release", "-DXL_WERROR=ON")
    assert re.search(r"C_FLAGS = .*-Werror", flags), flags[:2000]


def deps(which):
    r = subprocess.run(["bash", os.path.join(ROOT, "tools/install-deps.sh"), "--print", which],
                       capture_output=True, text=True, check=True)
    return set(r.stdout.split())


def test_build_set_is_only_build_and_run():
    build, test = deps("build"), deps("test")
    assert build and not build & TEST_ONLY, build & TEST_ONLY
    assert build < test and TEST_ONLY <= test
    assert deps("all") == test


def test_readme_and_ci_use_the_two_sets():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    quick = readme[readme.index("## Quick start"):readme.index("## Layout")]
    blocks = re.findall(r"```sh\n(.*?)```", quick, re.S)
    assert len(blocks) == 2, blocks
    assert blocks[0].startswith("tools/install-deps.sh build &&") and "xlserve serve" in blocks[0]
    assert blocks[1].strip() == "tools/install-deps.sh test && tools/test.sh"
    with open(os.path.join(ROOT, ".ci/run")) as f:
        ci = f.read()
    assert "tools/install-deps.sh test\n" in ci and "tools/test.sh" in ci

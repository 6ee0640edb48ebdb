"""`cmake --install` (into a DESTDIR, as a package build does): the binary, the bundled model,
the config, the unit and the nginx config land in the usual places, and the installed binary,
started with the installed config and no --model, serves the installed model; the build tree's
binary keeps the source tree's model as its default (the README's quick start)."""
import json
import os
import re
import signal
import subprocess
import threading
import time

import xlharness as X
from deployharness import ROOT, build_cache, cmake_install

MODEL = "austen-byte"  # the bundled model's name (XL_DEFAULT_MODEL_DIR)


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith("XLSERVE_")}


def confdir(dest, prefix):
    return os.path.join(dest + ("" if prefix in ("/usr", "/usr/local") else prefix),
                        "etc/xlserve")


def test_install_layout(installed):
    dest, prefix = installed
    root = dest + prefix
    assert os.access(os.path.join(root, "bin/xlserve"), os.X_OK)
    # the config goes to /etc/xlserve for /usr/local (not /usr/local/etc), as shipped
    conf = os.path.join(confdir(dest, prefix), "xlserve.conf")
    with open(conf) as f, open(os.path.join(ROOT, "config/xlserve.conf")) as g:
        assert f.read() == g.read()
    with open(os.path.join(root, "lib/systemd/system/xlserve.service")) as f:
        unit = f.read()
    assert "ExecStart=%s/bin/xlserve serve --config %s\n" % (
        prefix, conf[len(dest):]) in unit
    docs = re.search(r"(?m)^Documentation=file://(.*)$", unit).group(1)
    assert os.path.isfile(dest + docs), docs
    with open(os.path.join(root, "share/xlserve/nginx/xlserve.conf")) as f, \
            open(os.path.join(ROOT, "config/nginx/xlserve.conf")) as g:
        assert f.read() == g.read()
    # every file of the bundled models is installed
    src = os.path.join(ROOT, "models")
    for d, _, files in os.walk(src):
        for name in files:
            if not name.startswith("."):
                rel = os.path.relpath(os.path.join(d, name), src)
                assert os.path.isfile(os.path.join(root, "share/xlserve/models", rel)), rel


def test_reinstall_keeps_an_edited_config(tmp_path):
    dest = tmp_path / "d"
    cmake_install(dest)
    prefix = build_cache("CMAKE_INSTALL_PREFIX")
    conf = os.path.join(confdir(str(dest), prefix), "xlserve.conf")
    with open(conf, "a") as f:
        f.write("workers 3\n")
    out = cmake_install(dest)
    assert "Keeping: " + conf in out
    with open(conf) as f:
        assert f.read().endswith("workers 3\n")


def test_installed_binary_serves_the_installed_model(installed):
    dest, prefix = installed
    root = dest + prefix
    model_dir = os.path.join(root, "share/xlserve/models", MODEL)
    binary = os.path.join(root, "bin/xlserve")
    conf = os.path.join(confdir(dest, prefix), "xlserve.conf")
    # the default model of the installed binary is the installed one
    r = subprocess.run([binary, "serve", "--config", conf, "--dump-config"], capture_output=True,
                       text=True, env=clean_env(), timeout=30)
    assert r.returncode == 0, r.stderr
    line = [l for l in r.stdout.splitlines() if l.startswith("model ")][0]
    assert line == "model %s    # default" % model_dir, line
    r = subprocess.run([binary, "info"], capture_output=True, text=True, env=clean_env(),
                       timeout=60)
    assert r.returncode == 0, r.stderr
    # started as the unit starts it (plus a free loopback port), it serves that model
    proc = subprocess.Popen([binary, "serve", "--config", conf, "--host", "127.0.0.1",
                             "--port", "0"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=clean_env())
    lines = []
    port_box = []
    got_port = threading.Event()

    def reader():
        for raw in proc.stderr:
            lines.append(raw.decode(errors="replace"))
            try:
                o = json.loads(raw)
            except ValueError:
                continue
            if o.get("event") == "listening":
                port_box.append(o["port"])
                got_port.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        assert got_port.wait(30), "".join(lines)
        port = port_box[0]
        deadline = time.monotonic() + 60
        while X.request(port, "GET", "/health")[0] != 200:
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        st, _, b = X.request(port, "GET", "/v1/models")
        assert st == 200 and [m["id"] for m in json.loads(b)["data"]] == [MODEL]
        st, _, body = X.post_json(port, "/v1/completions",
                                  {"prompt": "It is a truth", "max_tokens": 8})
        assert st == 200 and body["usage"]["completion_tokens"] == 8, body
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        t.join(5)
    assert code == 0, "".join(lines[-20:])


def test_build_tree_binary_keeps_the_source_model_default():
    """The README's quick start runs ./build/xlserve serve: its default is models/austen-byte
    of the source tree, wherever a copy of xlserve may be installed."""
    r = subprocess.run([X.xlserve_bin(), "serve", "--dump-config"], capture_output=True,
                       text=True, env=clean_env(), timeout=30)
    assert r.returncode == 0, r.stderr
    line = [l for l in r.stdout.splitlines() if l.startswith("model ")][0]
    assert line == "model %s    # default" % build_cache("XL_DEFAULT_MODEL_DIR"), line


def test_nothing_lands_outside_the_prefix_but_the_config(installed):
    dest, prefix = installed
    for d, _, files in os.walk(dest):
        for name in files:
            rel = os.path.join(d, name)[len(dest):]
            assert rel.startswith(prefix + "/") or rel.startswith("/etc/xlserve/"), rel

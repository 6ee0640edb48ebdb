"""`convert.py pull` against a local HTTP server (127.0.0.1, no internet) that serves small
random repositories under the Hugging Face hub's URL layout: the tree API with LFS sha256 oids
and git blob ids, resolve URLs that redirect LFS files to a CDN path with X-Linked-Etag, and
HTTP Range. Checked: the files and their checksums, resume after a cut connection (within one
run and across runs), a corrupted download refused, a plain directory URL in the authors'
layout (model.pt + cache.pt), a local directory, and that the result loads in `xlserve info`."""
import hashlib
import http.server
import json
import os
import pickle
import re
import subprocess
import threading
import urllib.parse

import pytest

import data_utils
from conftest import TOOLS, run_py, xlserve_bin
from test_vocab_kinds import (austen_bytes, authors_checkpoint, engine_info, hf_dir,
                              hf_symbols, tokenizer_dict)
from xlmodel import safetensors_io

CONVERT = os.path.join(TOOLS, "convert.py")
LFS_SUFFIXES = (".safetensors", ".bin", ".pkl", ".pt", ".h5")


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub:
    """Repositories {repo: {path: bytes}} served the hub's way; plain directories
    {name: {path: bytes}} served at /plain/NAME/ with no API and no checksums.
    cut_once: paths whose next full response stops halfway (the connection is closed);
    corrupt: {path: bytes} served in place of the published content."""

    def __init__(self):
        self.repos, self.plain = {}, {}
        self.cut_once, self.corrupt = set(), {}
        self.renamed = {}  # old repo name -> new (answered with a 307, as the hub does)
        self.log = []  # (path, Range header or None)
        self.lock = threading.Lock()

    def blobs(self):
        return {hashlib.sha256(d).hexdigest(): (p, d) for files in self.repos.values()
                for p, d in files.items()}


def make_handler(hub):
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            with hub.lock:
                hub.log.append((path, self.headers.get("Range")))
            for old, new in hub.renamed.items():
                for pre in (f"/api/models/{old}/", f"/{old}/resolve/"):
                    if path.startswith(pre):
                        self.send_response(307)
                        self.send_header("Location", pre.replace(old, new) + path[len(pre):])
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return None
            m = re.fullmatch(r"/api/models/(.+)/tree/([^/]+)", path)
            if m:
                files = hub.repos.get(m.group(1))
                if files is None or m.group(2) != "main":
                    return self.send_error(404)
                entries = []
                for p, d in files.items():
                    e = {"type": "file", "path": p, "size": len(d), "oid": git_blob_id(d)}
                    if p.endswith(LFS_SUFFIXES):
                        e["lfs"] = {"oid": hashlib.sha256(d).hexdigest(), "size": len(d),
                                    "pointerSize": 134}
                    entries.append(e)
                entries.append({"type": "directory", "path": "subdir", "oid": "0" * 40,
                                "size": 0})
                return self.send_body(json.dumps(entries).encode(), "application/json")
            m = re.fullmatch(r"/(.+)/resolve/([^/]+)/(.+)", path)
            if m:
                files = hub.repos.get(m.group(1))
                if files is None or m.group(2) != "main" or m.group(3) not in files:
                    return self.send_error(404)
                name, data = m.group(3), files[m.group(3)]
                if name.endswith(LFS_SUFFIXES):  # LFS: a redirect carrying the checksum
                    sha = hashlib.sha256(data).hexdigest()
                    self.send_response(302)
                    self.send_header("Location", f"/cdn/{sha}")
                    self.send_header("X-Linked-Etag", f'"{sha}"')
                    self.send_header("X-Linked-Size", str(len(data)))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                return self.send_file(name, data, etag=git_blob_id(data))
            m = re.fullmatch(r"/cdn/([0-9a-f]{64})", path)
            if m:
                blob = hub.blobs().get(m.group(1))
                if blob is None:
                    return self.send_error(404)
                name, data = blob
                return self.send_file(name, hub.corrupt.get(name, data))
            m = re.fullmatch(r"/plain/([^/]+)/(.+)", path)
            if m and m.group(2) in hub.plain.get(m.group(1), {}):
                return self.send_file(m.group(2), hub.plain[m.group(1)][m.group(2)])
            return self.send_error(404)

        def send_body(self, body, ctype):
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def send_file(self, name, data, etag=None):
            start = 0
            rng = self.headers.get("Range")
            if rng:
                start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1))
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            if etag:
                self.send_header("ETag", f'"{etag}"')
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            with hub.lock:
                cut = name in hub.cut_once and start == 0
                hub.cut_once.discard(name)
            if cut:  # half the body, then the connection goes away
                self.wfile.write(body[:len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)
    return Handler


@pytest.fixture
def hub():
    h = FakeHub()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(h))
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    h.url = f"http://127.0.0.1:{srv.server_address[1]}"
    yield h
    srv.shutdown()
    srv.server_close()


def hf_repo(tmp_path, n=48):
    """The files of a small random HF TransfoXL repository (+ files pull must not fetch)."""
    syms = hf_symbols(n)
    src = hf_dir(tmp_path, n, seed=7)
    files = {p: (src / p).read_bytes() for p in ("config.json", "model.safetensors")}
    files["vocab.pkl"] = pickle.dumps(tokenizer_dict("old", syms))
    files["tf_model.h5"] = b"\x89HDF not wanted"
    files["README.md"] = b"# tiny\n"
    return files, syms


def pull(hub, source, out, *extra, env=None):
    return run_py([CONVERT, "pull", source, str(out), *map(str, extra)],
                  env_extra=dict({"XL_HUB_ENDPOINT": hub.url, "HF_TOKEN": ""}, **(env or {})))


def requests_for(hub, prefix):
    return [(p, r) for p, r in hub.log if p.startswith(prefix)]


def test_pull_hub_repository(tmp_path, hub):
    """Cut connection on the weights -> resumed with Range in the same run; every file's
    checksum verified; converted (transfo_xl from vocab.pkl); the serve line printed."""
    files, syms = hf_repo(tmp_path)
    hub.repos["tiny-org/tiny-xl"] = files
    weights = files["model.safetensors"]
    hub.cut_once.add("model.safetensors")
    out = tmp_path / "model"
    r = pull(hub, "tiny-org/tiny-xl", out, "--keep-download")
    assert r.returncode == 0, r.stderr
    assert f"xlserve serve --model {out}" in r.stdout
    # the weights came in two requests: from 0 (cut halfway), then the rest
    sha = hashlib.sha256(weights).hexdigest()
    cdn = requests_for(hub, f"/cdn/{sha}")
    assert cdn == [(f"/cdn/{sha}", None), (f"/cdn/{sha}", f"bytes={len(weights) // 2}-")], cdn
    assert "resuming at" in r.stderr and "sha256 " + sha + " verified" in r.stderr
    assert "git blob id " + git_blob_id(files["config.json"]) + " verified" in r.stderr
    # only what a conversion needs was fetched
    fetched = {p.rsplit("/", 1)[-1] for p, _ in requests_for(hub, "/tiny-org/")}
    assert fetched == {"config.json", "model.safetensors", "vocab.pkl"}, fetched
    dl = out / ".download"
    for name in fetched:
        assert (dl / name).read_bytes() == files[name], name
    assert not list(dl.glob("*.part"))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["xlserve_tokenizer"] == "transfo_xl"
    assert cfg["xlserve_tokenizer_options"]["never_split"] == ["<eos>", "<unk>", "<formula>"]
    assert (out / "vocab.txt").read_text().splitlines() == syms
    src_t, _ = safetensors_io.read(str(dl / "model.safetensors"))
    got_t, _ = safetensors_io.read(str(out / "model.safetensors"))
    name = "transformer.layers.0.dec_attn.qkv_net.weight"
    assert (src_t[name] == got_t[name]).all()
    # a second pull into the same place verifies what is there and fetches nothing again
    n_before = len(hub.log)
    r = pull(hub, "tiny-org/tiny-xl", out)
    assert r.returncode == 0, r.stderr
    assert [p for p, _ in hub.log[n_before:]] == ["/api/models/tiny-org/tiny-xl/tree/main"]
    assert not dl.exists()  # removed without --keep-download
    engine_info(out)


def test_pull_follows_a_renamed_repository(tmp_path, hub):
    """The hub answers an old repository name with a 307 to the new one, before the LFS
    redirect: the checksum on the second redirect is still found and checked."""
    files, _ = hf_repo(tmp_path)
    hub.repos["new-org/tiny"] = files
    hub.renamed["tiny"] = "new-org/tiny"
    out = tmp_path / "m"
    r = pull(hub, "tiny", out)
    assert r.returncode == 0, r.stderr
    sha = hashlib.sha256(files["model.safetensors"]).hexdigest()
    assert f"sha256 {sha} verified" in r.stderr
    assert any(p == "/tiny/resolve/main/model.safetensors" for p, _ in hub.log)
    hub.corrupt["model.safetensors"] = files["model.safetensors"][:-1] + b"\0"
    r = pull(hub, "tiny", tmp_path / "m2")
    assert r.returncode == 2 and "sha256 mismatch" in r.stderr, r.stderr


def test_pull_resumes_across_runs(tmp_path, hub):
    files, _ = hf_repo(tmp_path)
    hub.repos["o/r"] = files
    hub.cut_once.add("model.safetensors")
    out = tmp_path / "model"
    r = pull(hub, "o/r", out, "--retries", "0")
    half = len(files["model.safetensors"]) // 2
    assert r.returncode == 2
    assert f"broke off at {half} bytes" in r.stderr and "run the command again" in r.stderr.lower()
    part = out / ".download" / "model.safetensors.part"
    assert part.read_bytes() == files["model.safetensors"][:half]
    assert not (out / "config.json").exists()
    r = pull(hub, "o/r", out, "--retries", "0")
    assert r.returncode == 0, r.stderr
    ranges = [rg for p, rg in hub.log if p.startswith("/cdn/")]
    assert ranges.count(f"bytes={half}-") == 1, ranges
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 48


def test_pull_refuses_a_corrupted_file(tmp_path, hub):
    files, _ = hf_repo(tmp_path)
    hub.repos["o/r"] = files
    bad = bytearray(files["model.safetensors"])
    bad[len(bad) // 3] ^= 0x40
    hub.corrupt["model.safetensors"] = bytes(bad)
    out = tmp_path / "model"
    r = pull(hub, "o/r", out)
    assert r.returncode == 2
    sha = hashlib.sha256(files["model.safetensors"]).hexdigest()
    assert "model.safetensors: sha256 mismatch" in r.stderr and sha in r.stderr, r.stderr
    assert not (out / ".download" / "model.safetensors").exists()
    assert not (out / ".download" / "model.safetensors.part").exists()
    assert not (out / "config.json").exists()


def test_pull_errors(tmp_path, hub):
    r = pull(hub, "nobody/nothing", tmp_path / "m")
    assert r.returncode == 2 and "nobody/nothing" in r.stderr and "404" in r.stderr, r.stderr
    hub.repos["o/only-config"] = {"config.json": b"{}"}
    r = pull(hub, "o/only-config", tmp_path / "m2")
    assert r.returncode == 2 and "neither model.safetensors nor pytorch_model.bin" in r.stderr
    r = pull(hub, "a/b/c/d", tmp_path / "m3")
    assert r.returncode == 2 and "a/b/c/d" in r.stderr
    # a broken hub endpoint names the URL it tried
    r = pull(hub, "o/r", tmp_path / "m4", "--endpoint", "http://127.0.0.1:9/")
    assert r.returncode == 2 and "127.0.0.1:9" in r.stderr, r.stderr


def test_pull_plain_url_authors_layout_and_local_dir(tmp_path, hub):
    """The authors' model.pt + cache.pt (enwik8-style) from a plain directory URL (no API,
    no checksums published) -> byte_table; the same directory pulled from a local path."""
    raw = austen_bytes(4)
    d = tmp_path / "enwik8"
    d.mkdir()
    data_utils.prepare_enwik8(raw, str(d), 3000)
    corpus = data_utils.get_lm_corpus(str(d), "enwik8")
    ckpt = authors_checkpoint(tmp_path, len(corpus.vocab.idx2sym))
    hub.plain["enwik8-run"] = {"model.pt": ckpt.read_bytes(),
                               "cache.pt": (d / "cache.pt").read_bytes()}
    out = tmp_path / "m"
    r = pull(hub, f"{hub.url}/plain/enwik8-run/", out)
    assert r.returncode == 0, r.stderr
    assert "publishes no checksum" in r.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["xlserve_tokenizer"] == "byte_table"
    assert (out / "vocab.txt").read_text().splitlines() == corpus.vocab.idx2sym
    engine_info(out)
    local = tmp_path / "local"
    local.mkdir()
    (local / "model.pt").write_bytes(ckpt.read_bytes())
    (local / "cache.pt").write_bytes((d / "cache.pt").read_bytes())
    out2 = tmp_path / "m2"
    r = pull(hub, str(local), out2)
    assert r.returncode == 0, r.stderr
    assert (out2 / "config.json").read_text() == (out / "config.json").read_text()
    r = pull(hub, str(d), tmp_path / "m3")  # neither layout
    assert r.returncode == 2 and "not a model directory" in r.stderr


def test_info_loads_a_pulled_model(tmp_path, hub):
    """The binary loads what pull wrote (a words model here, readable by every build)."""
    b = xlserve_bin()
    if b is None:
        pytest.skip("xlserve binary not built")
    files, _ = hf_repo(tmp_path)
    hub.repos["o/r"] = files
    out = tmp_path / "m"
    r = pull(hub, "o/r", out, "--tokenizer", "words", "--mem-len", "12")
    assert r.returncode == 0, r.stderr
    r = subprocess.run([b, "info", "--model", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^mem_len\s+12\b", r.stdout, re.M), r.stdout
    assert re.search(r"^vocab_size\s+48$", r.stdout, re.M), r.stdout

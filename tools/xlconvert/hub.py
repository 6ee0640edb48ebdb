"""Fetching a model's source files: a Hugging Face hub repository, a plain directory URL, or a
local directory; then converting them (sources.convert_hf / convert_authors).

Hub layout (the public API that huggingface_hub uses):
  GET {endpoint}/api/models/{repo}/tree/{revision}     JSON list of {type, path, size, oid,
                                                       lfs: {oid (sha256), size}}
  GET {endpoint}/{repo}/resolve/{revision}/{path}      the file; for LFS files a redirect to a
                                                       CDN, the first response carrying
                                                       X-Linked-Etag: "<sha256>" and X-Linked-Size
Checksums: LFS files (the weights, vocab.pkl) by sha256 (the tree's lfs.oid, else the
X-Linked-Etag / ETag of the resolve response when it is 64 hex digits); small non-LFS files
(config.json) by their git blob id (sha1 of "blob <size>\\0" + content, the tree's oid or a
40-hex ETag). A file without a published checksum is accepted by size and reported.

Resume: each file is written to NAME.part; a later attempt (an automatic retry after a cut
connection, or the next run of the command) asks for the rest with `Range: bytes=N-` and appends
when the server answers 206, starts over on 200. Redirects are followed by hand so that an
Authorization header (HF_TOKEN) is only sent to the endpoint's host.
"""
import errno
import hashlib
import http.client
import json
import os
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

DEFAULT_ENDPOINT = "https://huggingface.co"
CHUNK = 1 << 20

# Which files of a repository are fetched, in order of preference within each group.
HF_CONFIG = ["config.json"]
HF_WEIGHTS = ["model.safetensors", "pytorch_model.bin"]
HF_VOCAB = ["vocab.pkl", "vocab.bin", "vocab.txt"]
HF_OPTIONAL = ["tokenizer_config.json", "special_tokens_map.json"]
AUTHORS = ["model.pt", "cache.pt"]


class HubError(Exception):
    pass


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


class Remote:
    """Where files come from: base URL of the files and, for the hub, the tree API URL."""

    def __init__(self, file_base, tree_url=None, token=None, label=None):
        self.file_base = file_base.rstrip("/") + "/"
        self.tree_url = tree_url
        self.token = token
        self.label = label or file_base
        self.host = urllib.parse.urlsplit(file_base).netloc

    def file_url(self, name):
        return self.file_base + urllib.parse.quote(name)


def remote_for(source, endpoint=None, revision="main"):
    """A Remote for NAME (owner/repo on the hub) or an http(s) directory URL; None for a
    local path."""
    if os.path.exists(source):
        return None
    token = os.environ.get("HF_TOKEN") or None
    if source.startswith(("http://", "https://")):
        return Remote(source, token=None, label=source)
    parts = source.strip("/").split("/")
    if len(parts) not in (1, 2) or not all(parts) or any(p in (".", "..") for p in parts):
        raise HubError(f"{source}: neither a local directory, an http(s) URL, nor a hub "
                       "repository name (owner/name)")
    ep = (endpoint or os.environ.get("XL_HUB_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    rev = urllib.parse.quote(revision, safe="")
    repo = "/".join(urllib.parse.quote(p) for p in parts)
    return Remote(f"{ep}/{repo}/resolve/{rev}/", tree_url=f"{ep}/api/models/{repo}/tree/{rev}",
                  token=token, label=f"{source} ({ep}, revision {revision})")


def _request(remote, url, headers=None, method="GET", timeout=60, max_redirects=10):
    """Opens URL following redirects by hand; returns (response, chain): the headers of every
    response on the way, redirects first (the hub puts X-Linked-Etag on the redirect to its
    CDN; a renamed repository adds a redirect before it)."""
    chain = []
    for _ in range(max_redirects + 1):
        h = dict(headers or {})
        h.setdefault("User-Agent", "xlserve-convert/1")
        if remote.token and urllib.parse.urlsplit(url).netloc == remote.host:
            h["Authorization"] = f"Bearer {remote.token}"
        req = urllib.request.Request(url, headers=h, method=method)
        try:
            resp = _OPENER.open(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            if e.code in (301, 302, 303, 307, 308) and e.headers.get("Location"):
                chain.append(e.headers)
                url = urllib.parse.urljoin(url, e.headers["Location"])
                e.close()
                continue
            raise
        chain.append(resp.headers)
        return resp, chain
    raise HubError(f"{url}: more than {max_redirects} redirects")


def _quoted_hex(v, n):
    if not v:
        return None
    v = v.strip()
    if v.startswith("W/"):
        v = v[2:]
    v = v.strip('"').lower()
    return v if len(v) == n and all(c in "0123456789abcdef" for c in v) else None


class Want:
    """A file to fetch: name, expected size / sha256 / git blob id when published."""

    def __init__(self, name, size=None, sha256=None, git_oid=None):
        self.name, self.size, self.sha256, self.git_oid = name, size, sha256, git_oid


def list_tree(remote):
    """{path: Want} from the hub's tree API, or None when there is no such API (a plain URL)
    or it does not answer with the expected JSON."""
    if remote.tree_url is None:
        return None
    try:
        resp, _ = _request(remote, remote.tree_url, timeout=60)
        with resp:
            entries = json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        if e.code in (401, 403, 404):
            raise HubError(f"{remote.label}: the hub answered {e.code} for the file list "
                           f"({remote.tree_url}): no such repository or revision, or it needs "
                           "a token (HF_TOKEN)") from None
        raise HubError(f"{remote.tree_url}: HTTP {e.code}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        raise HubError(f"{remote.tree_url}: cannot connect ({_reason(e)})") from None
    except ValueError:
        raise HubError(f"{remote.tree_url}: the file list is not JSON") from None
    if not isinstance(entries, list):
        raise HubError(f"{remote.tree_url}: the file list is not a JSON list")
    out = {}
    for e in entries:
        if not isinstance(e, dict) or e.get("type") != "file" or not isinstance(e.get("path"),
                                                                                str):
            continue
        lfs = e.get("lfs") if isinstance(e.get("lfs"), dict) else None
        if lfs:
            out[e["path"]] = Want(e["path"], lfs.get("size", e.get("size")),
                                  sha256=_quoted_hex(lfs.get("oid") or lfs.get("sha256"), 64))
        else:
            out[e["path"]] = Want(e["path"], e.get("size"), git_oid=_quoted_hex(e.get("oid"), 40))
    return out


def _reason(e):
    return getattr(e, "reason", None) or str(e)


def _git_blob_id(path):
    h = hashlib.sha1()
    h.update(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _sha256_of(path, upto=None):
    h = hashlib.sha256()
    left = upto
    with open(path, "rb") as f:
        while left is None or left > 0:
            block = f.read(CHUNK if left is None else min(CHUNK, left))
            if not block:
                break
            h.update(block)
            if left is not None:
                left -= len(block)
    return h


def _log(msg):
    print(msg, file=sys.stderr, flush=True)


def fetch_file(remote, want, dest_dir, retries=4, optional=False):
    """Downloads WANT into DEST_DIR with resume and checks; returns the path, or None when
    OPTIONAL and the server has no such file (404)."""
    dest = os.path.join(dest_dir, want.name)
    part = dest + ".part"
    url = remote.file_url(want.name)
    if os.path.exists(dest) and _verified(dest, want, url, quiet=True):
        _log(f"{want.name}: already here, checksum verified")
        return dest
    attempt = 0
    while True:
        try:
            _download_once(remote, url, want, part)
            break
        except urllib.error.HTTPError as e:
            if e.code == 404 and optional:
                return None
            if e.code < 500 or attempt >= retries:
                raise HubError(f"{url}: HTTP {e.code} {e.reason}") from None
            err = f"HTTP {e.code}"
        except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
            if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EACCES,
                                                      errno.EROFS):
                raise HubError(f"{part}: {e.strerror}") from None
            err = _reason(e)
        have = os.path.getsize(part) if os.path.exists(part) else 0
        if attempt >= retries:
            raise HubError(f"{url}: the download broke off at {have} bytes ({err}); "
                           f"{attempt + 1} attempts made. Run the command again to resume "
                           f"from {part}")
        attempt += 1
        _log(f"{want.name}: connection lost at {have} bytes ({err}); resuming "
             f"(attempt {attempt + 1} of {retries + 1})")
        time.sleep(min(2 ** attempt * 0.25, 5.0))
    _verified(part, want, url)  # raises (and removes the file) on a mismatch
    os.replace(part, dest)
    return dest


def _download_once(remote, url, want, part):
    have = os.path.getsize(part) if os.path.exists(part) else 0
    if want.size is not None and have > want.size:
        os.remove(part)
        have = 0
    if want.size is not None and have == want.size and have > 0:
        return True
    headers = {"Range": f"bytes={have}-"} if have else {}
    try:
        resp, chain = _request(remote, url, headers=headers)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # nothing left to send: the .part is whole (or bad)
            return True
        raise
    with resp:
        # what the server publishes about the file (the hub: on the first, redirect response)
        for h in chain:
            sha = _quoted_hex(h.get("X-Linked-Etag") or h.get("ETag"), 64)
            if sha and want.sha256 is None:
                want.sha256 = sha
            oid = _quoted_hex(h.get("X-Linked-Etag") or h.get("ETag"), 40)
            if oid and want.git_oid is None and want.sha256 is None:
                want.git_oid = oid
            size = h.get("X-Linked-Size")
            if size and size.isdigit() and want.size is None:
                want.size = int(size)
        if resp.status == 206:
            cr = resp.headers.get("Content-Range", "")
            try:
                start = int(cr.split()[1].split("-")[0])
            except (IndexError, ValueError):
                start = -1
            if start != have:
                raise HubError(f"{url}: asked for bytes from {have}, the server sent "
                               f"Content-Range {cr!r}")
            mode = "ab"
            _log(f"{want.name}: resuming at {have} bytes")
        else:
            mode, have = "wb", 0
            if want.size is None and resp.headers.get("Content-Length", "").isdigit():
                want.size = int(resp.headers["Content-Length"])
        total = want.size
        with open(part, mode) as out:
            got = have
            last = time.monotonic()
            while True:
                block = resp.read(CHUNK)
                if not block:
                    break
                out.write(block)
                got += len(block)
                if total and time.monotonic() - last > 5:
                    last = time.monotonic()
                    _log(f"{want.name}: {got / 1e6:.0f} / {total / 1e6:.0f} MB")
        if total is not None and got < total:
            raise ConnectionError(f"the server closed the connection after {got} of {total} "
                                  "bytes")
    return True


def _verified(path, want, url, quiet=False):
    size = os.path.getsize(path)
    if want.size is not None and size != want.size:
        if quiet:
            return False
        os.remove(path)
        raise HubError(f"{url}: got {size} bytes, the server announced {want.size}; the file "
                       "was removed: run the command again")
    if want.sha256:
        got = _sha256_of(path).hexdigest()
        if got != want.sha256:
            if quiet:
                return False
            os.remove(path)
            raise HubError(f"{url}: sha256 mismatch: the hub publishes {want.sha256}, the "
                           f"downloaded file has {got}; the file was removed (a corrupted "
                           "transfer or a changed file): run the command again")
        if not quiet:
            _log(f"{want.name}: {size} bytes, sha256 {got} verified")
        return True
    if want.git_oid:
        got = _git_blob_id(path)
        if got != want.git_oid:
            if quiet:
                return False
            os.remove(path)
            raise HubError(f"{url}: checksum mismatch: the hub publishes git blob id "
                           f"{want.git_oid}, the downloaded file has {got}; the file was "
                           "removed: run the command again")
        if not quiet:
            _log(f"{want.name}: {size} bytes, git blob id {got} verified")
        return True
    if quiet:
        return False  # nothing to check an existing file against: fetch it again
    _log(f"{want.name}: {size} bytes, sha256 {_sha256_of(path).hexdigest()} (the server "
         "publishes no checksum for it)")
    return True


def fetch(remote, dest_dir, retries=4):
    """Downloads a model's source files into DEST_DIR; returns the layout found:
    ("hf", dest_dir) or ("authors", dest_dir)."""
    tree = list_tree(remote)
    os.makedirs(dest_dir, exist_ok=True)
    if tree is not None:
        names = set(tree)

        def pick(group):
            return next((n for n in group if n in names), None)
        if "config.json" in names:
            chosen = ["config.json", pick(HF_WEIGHTS), pick(HF_VOCAB)] + \
                [n for n in HF_OPTIONAL if n in names]
            if chosen[1] is None:
                raise HubError(f"{remote.label}: neither model.safetensors nor "
                               "pytorch_model.bin in the repository (files: "
                               f"{', '.join(sorted(names))})")
            if chosen[2] is None:
                _log(f"{remote.label}: note: no vocab.pkl / vocab.bin / vocab.txt: only a "
                     "256-symbol byte model converts without one")
            layout = "hf"
        elif all(n in names for n in AUTHORS):
            chosen, layout = list(AUTHORS), "authors"
        else:
            raise HubError(f"{remote.label}: neither a Hugging Face TransfoXL repository "
                           "(config.json + weights) nor the authors' layout (model.pt + "
                           f"cache.pt); files: {', '.join(sorted(names)) or 'none'}")
        for n in chosen:
            if n:
                fetch_file(remote, tree[n], dest_dir, retries)
        return layout, dest_dir
    # a plain directory URL: probe the file names
    if fetch_file(remote, Want("config.json"), dest_dir, retries, optional=True):
        for group in (HF_WEIGHTS, HF_VOCAB):
            got = None
            for n in group:
                got = fetch_file(remote, Want(n), dest_dir, retries, optional=True)
                if got:
                    break
            if got is None and group is HF_WEIGHTS:
                raise HubError(f"{remote.label}: has config.json but neither "
                               "model.safetensors nor pytorch_model.bin")
        for n in HF_OPTIONAL:
            fetch_file(remote, Want(n), dest_dir, retries, optional=True)
        return "hf", dest_dir
    if fetch_file(remote, Want("model.pt"), dest_dir, retries, optional=True):
        if not fetch_file(remote, Want("cache.pt"), dest_dir, retries, optional=True):
            raise HubError(f"{remote.label}: has model.pt but no cache.pt (the vocabulary)")
        return "authors", dest_dir
    raise HubError(f"{remote.label}: no config.json (Hugging Face layout) and no model.pt "
                   "(the authors' layout) there")


def local_layout(path):
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "config.json")):
            return "hf", path
        if os.path.exists(os.path.join(path, "model.pt")):
            if not os.path.exists(os.path.join(path, "cache.pt")):
                raise HubError(f"{path}: model.pt without cache.pt (the vocabulary)")
            return "authors", path
    raise HubError(f"{path}: not a model directory (no config.json, no model.pt + cache.pt)")


def remove_download(dest_dir):
    shutil.rmtree(dest_dir, ignore_errors=True)

#!/usr/bin/python3
"""Builds the Austen corpus: fetches Debian's r-cran-janeaustenr (apt-get download, in a temporary
directory), reads the six novels from data/Rdata.rdb without R, checks the text against a recorded
SHA-256, and writes train/valid/test splits that hold out whole chapters (rule in README.md).

    /usr/bin/python3 tools/corpus/prepare.py [--out corpus-data] [--deb FILE.deb]
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from corpus import rserial  # noqa: E402

PACKAGE = "r-cran-janeaustenr"
DATA_DIR = "usr/lib/R/site-library/janeaustenr/data"
# Book order of every output (the package's variable names).
BOOKS = ["sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey",
         "persuasion"]
# SHA-256 of the six books' text as joined by book_text(), in BOOKS order (janeaustenr 1.0.0).
TEXT_SHA256 = "f2516f2139e3cecf49657122fed58ac46313f1fdff32a26fc66789293e92d573"
CHAPTER_RE = re.compile(r"^\s*chapter\s+([0-9]+|[ivxlc]+)\s*\.?\s*$", re.IGNORECASE)
# Split rule: the k-th chapter of a book (1-based, in book order) goes to valid if k % 20 == 7,
# to test if k % 20 == 14, otherwise to train; text before a book's first chapter goes to train.
VALID_MOD, TEST_MOD, PERIOD = 7, 14, 20


def book_text(lines):
    return "".join(line + "\n" for line in lines)


def split_of_chapter(k):
    if k % PERIOD == VALID_MOD:
        return "valid"
    if k % PERIOD == TEST_MOD:
        return "test"
    return "train"


def chapters(lines):
    """[(k, first_line, end_line)] with k = 0 for the front matter."""
    starts = [i for i, line in enumerate(lines) if CHAPTER_RE.match(line)]
    spans = []
    if not starts or starts[0] > 0:
        spans.append((0, 0, starts[0] if starts else len(lines)))
    for k, s in enumerate(starts, 1):
        e = starts[k] if k < len(starts) else len(lines)
        spans.append((k, s, e))
    return spans


def extract_books(deb_path):
    """Returns {book: [lines]} from the .deb file, with no R and no dpkg needed."""
    with tempfile.TemporaryDirectory() as tmp:
        # A .deb is an ar archive; data.tar.* holds the files.
        with open(deb_path, "rb") as f:
            blob = f.read()
        if blob[:8] != b"!<arch>\n":
            raise SystemExit(f"{deb_path}: not a Debian package (no ar header)")
        pos, data_tar = 8, None
        while pos + 60 <= len(blob):
            name = blob[pos:pos + 16].decode().strip().rstrip("/")
            size = int(blob[pos + 48:pos + 58].decode().strip())
            if name.startswith("data.tar"):
                data_tar = os.path.join(tmp, name)
                with open(data_tar, "wb") as f:
                    f.write(blob[pos + 60:pos + 60 + size])
            pos += 60 + size + (size & 1)
        if data_tar is None:
            raise SystemExit(f"{deb_path}: no data.tar member")
        if data_tar.endswith(".zst"):
            subprocess.run(["zstd", "-q", "-d", data_tar, "-o", data_tar[:-4]], check=True)
            data_tar = data_tar[:-4]
        with tarfile.open(data_tar) as tar:
            got = {}
            for member in ("Rdata.rdx", "Rdata.rdb"):
                f = tar.extractfile("./" + DATA_DIR + "/" + member)
                got[member] = f.read()
        for member, raw in got.items():
            with open(os.path.join(tmp, member), "wb") as f:
                f.write(raw)
        db = rserial.read_lazyload_db(os.path.join(tmp, "Rdata.rdx"), os.path.join(tmp, "Rdata.rdb"))
    books = {}
    for b in BOOKS:
        if b not in db or db[b].type != rserial.STRSXP:
            raise SystemExit(f"{deb_path}: Rdata.rdb has no character vector {b!r}")
        books[b] = ["" if s is None else s for s in db[b].value]
    return books


def download_deb(tmp):
    subprocess.run(["apt-get", "download", PACKAGE], cwd=tmp, check=True,
                   stdout=subprocess.DEVNULL)
    debs = [f for f in os.listdir(tmp) if f.startswith(PACKAGE) and f.endswith(".deb")]
    if not debs:
        raise SystemExit(f"apt-get download {PACKAGE} produced no .deb")
    return os.path.join(tmp, debs[0])


def write_splits(books, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    parts = {"train": [], "valid": [], "test": []}
    manifest = {"books": BOOKS, "rule": f"chapter k of a book: valid if k%{PERIOD}=={VALID_MOD}, "
                f"test if k%{PERIOD}=={TEST_MOD}, else train; front matter: train",
                "chapters": {"train": [], "valid": [], "test": []}}
    for b in BOOKS:
        lines = books[b]
        for k, s, e in chapters(lines):
            split = "train" if k == 0 else split_of_chapter(k)
            parts[split].append(book_text(lines[s:e]))
            manifest["chapters"][split].append(f"{b}:{k}")
    sizes = {}
    for split, texts in parts.items():
        data = "".join(texts).encode("utf-8")
        with open(os.path.join(out_dir, split + ".txt"), "wb") as f:
            f.write(data)
        sizes[split] = len(data)
        manifest[split + "_bytes"] = len(data)
        manifest[split + "_sha256"] = hashlib.sha256(data).hexdigest()
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    return sizes


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default="corpus-data", help="output directory (default corpus-data/)")
    ap.add_argument("--deb", help="use this r-cran-janeaustenr .deb instead of apt-get download")
    ap.add_argument("--no-check", action="store_true", help="skip the text checksum")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        deb = args.deb or download_deb(tmp)
        books = extract_books(deb)
    text = "".join(book_text(books[b]) for b in BOOKS).encode("utf-8")
    digest = hashlib.sha256(text).hexdigest()
    if not args.no_check and digest != TEXT_SHA256:
        raise SystemExit(f"text checksum mismatch: got {digest}, recorded {TEXT_SHA256} "
                         "(a different janeaustenr version? rerun with --no-check to accept)")
    sizes = write_splits(books, args.out)
    print(f"{len(text)} bytes of text, sha256 {digest}")
    for split, n in sizes.items():
        print(f"{split}: {n} bytes -> {os.path.join(args.out, split + '.txt')}")


if __name__ == "__main__":
    main()

"""Corpus tests without the network: a hand-made R serialisation (XDR, version 3) in a
hand-made lazy-load database inside a hand-made .deb, read by tools/corpus, then split by
whole chapters."""
import gzip
import io
import struct
import tarfile
import zlib

import pytest

from corpus import prepare, rserial


def i32(v):
    return struct.pack(">i", v)


def header():
    return b"X\n" + i32(3) + i32(0x040201) + i32(0x030500) + i32(5) + b"UTF-8"


def charsxp(s):
    if s is None:
        return i32(9) + i32(-1)
    raw = s.encode("utf-8")
    levels = 64 if all(ord(c) < 128 for c in s) else 8  # ASCII / UTF8 mask
    return i32(9 | (levels << 12)) + i32(len(raw)) + raw


def strsxp(items, attrs=b""):
    return i32(16 | (0x200 if attrs else 0)) + i32(len(items)) + \
        b"".join(charsxp(s) for s in items) + attrs


def names_attr(names, first=True):
    # pairlist node with tag: the symbol "names" (a back-reference after its first use)
    tag = (i32(1) + charsxp("names")) if first else i32((1 << 8) | 255)
    return i32(2 | 0x400) + tag + strsxp(names) + i32(254)


def intsxp(vals):
    return i32(13) + i32(len(vals)) + b"".join(i32(v) for v in vals)


def vecsxp(items, attrs=b""):
    return i32(19 | (0x200 if attrs else 0)) + i32(len(items)) + b"".join(items) + attrs


BOOKS = {
    "sensesensibility": ["SENSE", "", "CHAPTER 1", "", "Elinor.", "CHAPTER 2", "Marianne."],
    "prideprejudice": ["PRIDE", "Chapter 1", "It is a truth.", "Chapter 2", "Bennet."],
    "mansfieldpark": ["CHAPTER I", "Fanny \u00a3 caf\u00e9.", "CHAPTER II", "Edmund."],
    "emma": ["EMMA", "CHAPTER I", "Emma Woodhouse,", None, "CHAPTER II", "Knightley."],
    "northangerabbey": ["CHAPTER 1", "Catherine."],
    "persuasion": ["Chapter 1", "Anne."] + sum(([f"Chapter {k}", f"text {k}."]
                                                for k in range(2, 16)), []),
}


def build_db(books):
    rdb, pos = b"", []
    for lines in books.values():
        raw = header() + strsxp(lines)
        blob = struct.pack(">I", len(raw)) + zlib.compress(raw)
        pos.append((len(rdb), len(blob)))
        rdb += blob
    variables = vecsxp([intsxp(list(p)) for p in pos], names_attr(list(books), first=True))
    refs = vecsxp([])
    compressed = i32(10) + i32(1) + i32(1)
    index = vecsxp([variables, refs, compressed],
                   names_attr(["variables", "references", "compressed"], first=False))
    return gzip.compress(header() + index), rdb


def ar_member(name, data):
    hdr = f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode()
    return hdr + data + (b"\n" if len(data) % 2 else b"")


def build_deb(path, rdx, rdb):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, data in (("Rdata.rdx", rdx), ("Rdata.rdb", rdb)):
            ti = tarfile.TarInfo("./" + prepare.DATA_DIR + "/" + name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    with open(path, "wb") as f:
        f.write(b"!<arch>\n" + ar_member("debian-binary", b"2.0\n") +
                ar_member("data.tar.xz", buf.getvalue()))


def test_rserial_reads_handmade_db(tmp_path):
    rdx, rdb = build_db(BOOKS)
    (tmp_path / "Rdata.rdx").write_bytes(rdx)
    (tmp_path / "Rdata.rdb").write_bytes(rdb)
    db = rserial.read_lazyload_db(str(tmp_path / "Rdata.rdx"), str(tmp_path / "Rdata.rdb"))
    assert list(db) == list(BOOKS)
    assert db["emma"].value == BOOKS["emma"]  # NA_character_ -> None
    assert db["mansfieldpark"].value[1] == "Fanny \u00a3 caf\u00e9."


def test_rserial_rejects_bad_input():
    with pytest.raises(rserial.RFormatError, match="not an XDR"):
        rserial.unserialize(b"A\n" + b"\0" * 20)
    with pytest.raises(rserial.RFormatError, match="truncated"):
        rserial.unserialize(header() + i32(16) + i32(5))
    with pytest.raises(rserial.RFormatError, match="unsupported R object type 3"):
        rserial.unserialize(header() + i32(3))  # a closure
    with pytest.raises(rserial.RFormatError, match="zlib"):
        rserial.decompress_blob(b"\0\0\0\x05garbage", "x")


def test_prepare_from_handmade_deb(tmp_path):
    rdx, rdb = build_db(BOOKS)
    deb = tmp_path / "r-cran-janeaustenr_0_all.deb"
    build_deb(deb, rdx, rdb)
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match="checksum mismatch"):
        prepare.main(["--deb", str(deb), "--out", str(out)])
    prepare.main(["--deb", str(deb), "--out", str(out), "--no-check"])
    train = (out / "train.txt").read_text()
    valid = (out / "valid.txt").read_text()
    test = (out / "test.txt").read_text()
    # persuasion has 15 chapters: 7 -> valid, 14 -> test, the rest (and all other books) train
    assert valid == "Chapter 7\ntext 7.\n"
    assert test == "Chapter 14\ntext 14.\n"
    assert "Elinor." in train and "Chapter 13\ntext 13.\nChapter 15" in train
    assert "Fanny \u00a3 caf\u00e9." in train and "Emma Woodhouse,\n\nCHAPTER II" in train
    total = sum(len(prepare.book_text(["" if s is None else s for s in b]))
                for b in BOOKS.values())
    assert len(train) + len(valid) + len(test) == total

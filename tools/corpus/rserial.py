"""A minimal reader for R's serialisation format (XDR binary, versions 2 and 3) and for R's
lazy-load databases (.rdx index + .rdb objects), enough to pull character vectors out of an R
package's data/Rdata.rdb without R.

Supported: NULL, character/integer/logical/double/raw vectors, lists (VECSXP/EXPRSXP), pairlists
(attributes, tags), symbols, back-references (REFSXP), and the special singletons. Anything else
(closures, environments, byte code, ALTREP, ...) raises RFormatError naming the type: the janeaustenr
data never needs them. Nothing in a file is executed; it is only parsed.
"""
import bz2
import lzma
import struct
import zlib

# SEXP type codes (R's Rinternals.h) and the serialisation's pseudo-types (serialize.c).
NILSXP, SYMSXP, LISTSXP, CLOSXP, ENVSXP, PROMSXP, LANGSXP = 0, 1, 2, 3, 4, 5, 6
CHARSXP, LGLSXP, INTSXP, REALSXP, CPLXSXP, STRSXP = 9, 10, 13, 14, 15, 16
DOTSXP, VECSXP, EXPRSXP, RAWSXP, S4SXP = 17, 19, 20, 24, 25
REFSXP, NILVALUE_SXP, GLOBALENV_SXP, UNBOUNDVALUE_SXP = 255, 254, 253, 252
MISSINGARG_SXP, BASENAMESPACE_SXP, EMPTYENV_SXP, BASEENV_SXP = 251, 250, 242, 241

NA_INTEGER = -2147483648
_UTF8_MASK, _LATIN1_MASK, _BYTES_MASK = 1 << 3, 1 << 2, 1 << 1


class RFormatError(ValueError):
    pass


class RSymbol(str):
    """An R symbol (a name), distinct from a character string."""


class RObject:
    """An R value: .type (SEXP code), .value (python list / None), .attrs (dict name -> RObject)."""

    def __init__(self, sexptype, value, attrs=None):
        self.type = sexptype
        self.value = value
        self.attrs = attrs or {}

    def names(self):
        n = self.attrs.get("names")
        return list(n.value) if n is not None else None

    def __getitem__(self, key):
        """By position, or by name for named lists/vectors."""
        if isinstance(key, str):
            names = self.names() or []
            if key not in names:
                raise KeyError(key)
            key = names.index(key)
        return self.value[key]

    def __len__(self):
        return len(self.value) if self.value is not None else 0

    def __repr__(self):
        return f"RObject(type={self.type}, len={len(self)}, attrs={list(self.attrs)})"


_SPECIALS = {NILVALUE_SXP: None, GLOBALENV_SXP: "<globalenv>", UNBOUNDVALUE_SXP: "<unbound>",
             MISSINGARG_SXP: "<missing>", BASENAMESPACE_SXP: "<base namespace>",
             EMPTYENV_SXP: "<emptyenv>", BASEENV_SXP: "<baseenv>"}


class _Reader:
    def __init__(self, data, where):
        self.d = data
        self.p = 0
        self.where = where
        self.refs = []

    def _take(self, n):
        if n < 0 or self.p + n > len(self.d):
            raise RFormatError(f"{self.where}: truncated R serialisation at byte {self.p}")
        b = self.d[self.p:self.p + n]
        self.p += n
        return b

    def int(self):
        return struct.unpack(">i", self._take(4))[0]

    def length(self):
        n = self.int()
        if n == -1:  # long vector: two more ints, upper and lower 32 bits
            hi, lo = struct.unpack(">II", self._take(8))
            n = (hi << 32) | lo
        if n < 0:
            raise RFormatError(f"{self.where}: negative vector length {n}")
        return n

    def header(self):
        fmt = self._take(2)
        if fmt != b"X\n":
            raise RFormatError(f"{self.where}: not an XDR binary R serialisation (starts {fmt!r})")
        version = self.int()
        self.int()  # writer's R version
        self.int()  # minimal reader version
        if version == 3:
            nelen = self.int()
            self._take(nelen)  # native encoding name
        elif version != 2:
            raise RFormatError(f"{self.where}: unsupported serialisation version {version}")

    def charsxp(self, levels):
        n = self.int()
        if n == -1:
            return None  # NA_character_
        raw = self._take(n)
        if levels & _LATIN1_MASK:
            return raw.decode("latin-1")
        if levels & _BYTES_MASK:
            return raw.decode("latin-1")  # uninterpreted bytes: keep them one-to-one
        return raw.decode("utf-8")

    def attributes(self):
        """A pairlist of tagged values -> dict."""
        pl = self.item()
        out = {}
        while pl is not None:
            if not isinstance(pl, _Pair):
                raise RFormatError(f"{self.where}: attributes are not a pairlist")
            out[str(pl.tag)] = pl.car
            pl = pl.cdr
        return out

    def item(self):
        flags = self.int()
        t = flags & 0xFF
        levels = flags >> 12
        has_attr = bool(flags & (1 << 9))
        has_tag = bool(flags & (1 << 10))
        if t in _SPECIALS:
            return _SPECIALS[t]
        if t == REFSXP:
            idx = flags >> 8
            if idx == 0:
                idx = self.int()
            if not 1 <= idx <= len(self.refs):
                raise RFormatError(f"{self.where}: bad back-reference {idx}")
            return self.refs[idx - 1]
        if t == SYMSXP:
            name = self.item()
            sym = RSymbol(name if isinstance(name, str) else "")
            self.refs.append(sym)
            return sym
        if t in (LISTSXP, LANGSXP, DOTSXP):
            # Pairlists are long chains: iterate on cdr instead of recursing.
            head = cur = None
            while True:
                attrs = self.attributes() if has_attr else {}
                tag = self.item() if has_tag else None
                node = _Pair(tag, self.item(), attrs)
                if cur is None:
                    head = node
                else:
                    cur.cdr = node
                cur = node
                flags = self.int()
                nt = flags & 0xFF
                if nt not in (LISTSXP, LANGSXP, DOTSXP):
                    self.p -= 4
                    cur.cdr = self.item()
                    return head
                has_attr = bool(flags & (1 << 9))
                has_tag = bool(flags & (1 << 10))
        if t == CHARSXP:
            return self.charsxp(levels)
        if t in (LGLSXP, INTSXP):
            n = self.length()
            vals = list(struct.unpack(f">{n}i", self._take(4 * n)))
            vals = [None if v == NA_INTEGER else v for v in vals]
            if t == LGLSXP:
                vals = [None if v is None else bool(v) for v in vals]
            value = vals
        elif t == REALSXP:
            n = self.length()
            value = list(struct.unpack(f">{n}d", self._take(8 * n)))
        elif t == CPLXSXP:
            n = self.length()
            v = struct.unpack(f">{2 * n}d", self._take(16 * n))
            value = [complex(v[2 * i], v[2 * i + 1]) for i in range(n)]
        elif t == RAWSXP:
            n = self.length()
            value = bytes(self._take(n))
        elif t == STRSXP:
            n = self.length()
            value = []
            for _ in range(n):
                f = self.int()
                if f & 0xFF != CHARSXP:
                    raise RFormatError(f"{self.where}: character vector element of type {f & 0xFF}")
                value.append(self.charsxp(f >> 12))
        elif t in (VECSXP, EXPRSXP):
            n = self.length()
            value = [self.item() for _ in range(n)]
        else:
            raise RFormatError(f"{self.where}: unsupported R object type {t} (flags 0x{flags:x})")
        attrs = self.attributes() if has_attr else {}
        return RObject(t, value, attrs)


class _Pair:
    __slots__ = ("tag", "car", "cdr", "attrs")

    def __init__(self, tag, car, attrs):
        self.tag, self.car, self.cdr, self.attrs = tag, car, None, attrs


def unserialize(data, where="<data>"):
    """Parses one XDR R serialisation (bytes) into RObject / str / None / _Pair values."""
    r = _Reader(bytes(data), where)
    r.header()
    obj = r.item()
    return obj


def decompress_blob(blob, where, kind=1):
    """An .rdb object: 4-byte big-endian uncompressed length, then (kind 1) a zlib stream, or
    (kind 2/3) a type byte ('2' bzip2, 'Z' xz, '0' stored) and the stream."""
    if len(blob) < 4:
        raise RFormatError(f"{where}: object shorter than its 4-byte length header")
    (n,) = struct.unpack(">I", blob[:4])
    if kind in (2, 3):
        typ, body = blob[4:5], blob[5:]
        if typ == b"2":
            out = bz2.decompress(body)
        elif typ == b"Z":
            out = lzma.decompress(body)
        elif typ == b"0":
            out = body
        else:
            out = zlib.decompress(body)
    else:
        try:
            out = zlib.decompress(blob[4:])
        except zlib.error as e:
            raise RFormatError(f"{where}: zlib stream is corrupt ({e})") from None
    if len(out) != n:
        raise RFormatError(f"{where}: decompressed to {len(out)} bytes, header says {n}")
    return out


def read_rds_bytes(data, where):
    """An .rds/.rdx file: gzip (R's default), bzip2, xz, or plain serialisation."""
    if data[:2] == b"\x1f\x8b":
        data = zlib.decompress(data, 16 + zlib.MAX_WBITS)
    elif data[:3] == b"BZh":
        data = bz2.decompress(data)
    elif data[:6] == b"\xfd7zXZ\x00":
        data = lzma.decompress(data)
    elif data[:2] != b"X\n":
        # The lazy-load style: 4-byte length + zlib.
        data = decompress_blob(data, where)
    return unserialize(data, where)


def read_lazyload_db(rdx_path, rdb_path):
    """Returns {variable name: RObject} for every variable of an R lazy-load database."""
    with open(rdx_path, "rb") as f:
        index = read_rds_bytes(f.read(), rdx_path)
    if not isinstance(index, RObject) or index.type != VECSXP:
        raise RFormatError(f"{rdx_path}: index is not a list")
    variables = index["variables"]
    compressed = index["compressed"] if "compressed" in (index.names() or []) else None
    kind = 1
    if isinstance(compressed, RObject) and compressed.value:
        c = compressed.value[0]
        kind = int(c) if c not in (None, True, False) else 1
    with open(rdb_path, "rb") as f:
        rdb = f.read()
    out = {}
    for name, pos in zip(variables.names() or [], variables.value):
        off, length = int(pos.value[0]), int(pos.value[1])
        if off < 0 or length < 0 or off + length > len(rdb):
            raise RFormatError(f"{rdb_path}: object {name!r} at {off}+{length} is outside the file")
        where = f"{rdb_path}[{name}]"
        out[name] = unserialize(decompress_blob(rdb[off:off + length], where, kind), where)
    return out

"""Reads a TensorFlow checkpoint (the "tensor bundle" of tf.train.Saver V2) without TensorFlow
and without a protobuf library. Written from the format's public description; nothing in the
files is ever executed, every length and offset is bounds-checked, every error names the file
and, where there is one, the tensor.

A bundle with prefix P is:
  P.index                  a LevelDB-format table (SSTable): key "" -> BundleHeaderProto,
                           key = tensor name -> BundleEntryProto, keys in ascending byte order
  P.data-SSSSS-of-NNNNN    the raw tensor bytes of shard S of N, at each entry's offset

Table layout (LevelDB's table_format): the last 48 bytes are the footer: the metaindex block
handle and the index block handle (each two varint64s: offset, size), zero padding to 40 bytes,
then the magic 0xdb4775248b80fb57 as a little-endian fixed64. Each block is followed by a
5-byte trailer: a compression type byte (0 none, 1 snappy) and the masked crc32c of the block
contents plus that type byte. A block holds entries (varint32 shared key bytes, varint32
unshared key bytes, varint32 value length, the unshared key bytes, the value), then an array of
fixed32 restart offsets and their fixed32 count. The index block maps a separator key of each
data block to that block's handle.

Protocol buffer messages (proto3 wire format, decoded by hand):
  BundleHeaderProto { int32 num_shards = 1; Endianness endianness = 2 (0 LITTLE, 1 BIG);
                      VersionDef version = 3 { int32 producer = 1; int32 min_consumer = 2; } }
  BundleEntryProto  { DataType dtype = 1; TensorShapeProto shape = 2; int32 shard_id = 3;
                      int64 offset = 4; int64 size = 5; fixed32 crc32c = 6 (masked crc32c of
                      the tensor's bytes as stored); repeated TensorSliceProto slices = 7; }
  TensorShapeProto  { repeated Dim dim = 2 { int64 size = 1; string name = 2; };
                      bool unknown_rank = 3; }

Only DT_FLOAT tensors are read (the authors' checkpoints hold nothing else that a model needs);
other dtypes, partitioned (sliced) variables, snappy-compressed index blocks, truncated shards and
checksum mismatches are refused with an error naming the tensor.
"""
import os
import struct

import numpy as np

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_LEN = 48
BLOCK_TRAILER_LEN = 5

# tensorflow/core/framework/types.proto (the values a message is likely to name)
DTYPE_NAMES = {0: "DT_INVALID", 1: "DT_FLOAT", 2: "DT_DOUBLE", 3: "DT_INT32", 4: "DT_UINT8",
               5: "DT_INT16", 6: "DT_INT8", 7: "DT_STRING", 8: "DT_COMPLEX64", 9: "DT_INT64",
               10: "DT_BOOL", 14: "DT_BFLOAT16", 17: "DT_UINT16", 19: "DT_HALF",
               20: "DT_RESOURCE", 21: "DT_VARIANT", 22: "DT_UINT32", 23: "DT_UINT64"}
DT_FLOAT = 1


class BundleError(Exception):
    pass


# ------------------------------------------------------------------------------------------
# crc32c (Castagnoli, reflected polynomial 0x82F63B78), table-driven

def _make_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_TABLE = _make_table()
_TABLE_NP = np.array(_TABLE, dtype=np.uint32)
_MASK_DELTA = 0xA282EAD8


def _raw_bytes(reg, data):
    """The CRC register after feeding DATA (bytes-like) one byte at a time."""
    t = _TABLE
    for b in bytes(data):
        reg = t[(reg ^ b) & 0xFF] ^ (reg >> 8)
    return reg


def _apply(images, x):
    """The GF(2)-linear map given by the images of the 32 unit vectors, applied to x."""
    out = 0
    k = 0
    while x:
        if x & 1:
            out ^= images[k]
        x >>= 1
        k += 1
    return out


def _zeros_operator(nbytes):
    """Images of the 32 unit vectors under 'feed NBYTES zero bytes into the register'."""
    one = [_raw_bytes(1 << k, b"\0") for k in range(32)]
    result = [1 << k for k in range(32)]  # identity
    power = one
    while nbytes:
        if nbytes & 1:
            result = [_apply(power, r) for r in result]
        power = [_apply(power, p) for p in power]
        nbytes >>= 1
    return result


def _byte_tables(images):
    """4 x 256 lookup tables so a uint32 array can be mapped with four gathers."""
    tabs = np.zeros((4, 256), dtype=np.uint32)
    for b in range(4):
        img = images[8 * b:8 * b + 8]
        row = [0] * 256
        for v in range(1, 256):
            low = (v & -v).bit_length() - 1
            row[v] = row[v & (v - 1)] ^ img[low]
        tabs[b] = row
    return tabs


def _map_array(tabs, x):
    return (tabs[0][x & 0xFF] ^ tabs[1][(x >> 8) & 0xFF] ^ tabs[2][(x >> 16) & 0xFF]
            ^ tabs[3][x >> 24])


def _raw_numpy(reg, buf):
    """Same as _raw_bytes for a large uint8 array: the data is cut into K equal chunks whose
    registers are advanced in lock step (one vectorised table step per byte column), then the
    chunk registers are combined pairwise (reg(XY) = Z_len(Y)(reg(X)) ^ reg(Y from 0), Z being
    the linear 'feed zero bytes' operator), then the leftover tail is fed byte by byte."""
    n = buf.size
    k = 1
    while k * 2 <= min(65536, n // 256):
        k *= 2
    m = n // k
    body = buf[:k * m].reshape(k, m)
    regs = np.zeros(k, dtype=np.uint32)
    regs[0] = reg
    step = 512  # byte columns per block: a [step, k] copy of 32 MiB at most
    for j0 in range(0, m, step):
        cols = np.ascontiguousarray(body[:, j0:j0 + step].T)  # [cols, k]
        for col in cols:
            regs = _TABLE_NP[(regs ^ col) & 0xFF] ^ (regs >> 8)
    length = m
    while regs.size > 1:
        tabs = _byte_tables(_zeros_operator(length))
        regs = _map_array(tabs, regs[0::2]) ^ regs[1::2]
        length *= 2
    return _raw_bytes(int(regs[0]), buf[k * m:].tobytes())


def crc32c(data, crc=0):
    """crc32c of DATA (bytes-like or a numpy array's bytes), continuing from CRC."""
    if isinstance(data, np.ndarray):
        buf = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    else:
        buf = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
    reg = crc ^ 0xFFFFFFFF
    if buf.size < 65536:
        reg = _raw_bytes(reg, buf.tobytes())
    else:
        reg = _raw_numpy(reg, buf)
    return reg ^ 0xFFFFFFFF


def mask_crc(c):
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def unmask_crc(m):
    r = (m - _MASK_DELTA) & 0xFFFFFFFF
    return ((r >> 17) | (r << 15)) & 0xFFFFFFFF


# ------------------------------------------------------------------------------------------
# Protocol buffer wire format

def read_varint(buf, pos, where, limit=None):
    """(value, next position) of the base-128 varint at POS (at most 10 bytes)."""
    end = len(buf) if limit is None else limit
    value = 0
    for i in range(10):
        if pos >= end:
            raise BundleError(f"{where}: truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            if value >= 1 << 64:
                raise BundleError(f"{where}: varint out of range")
            return value, pos
    raise BundleError(f"{where}: varint longer than 10 bytes")


def _signed64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def proto_fields(buf, where):
    """[(field number, wire type, value)] of a serialized message: varints as int, fixed32 and
    fixed64 as int, length-delimited fields as bytes. Groups (wire types 3/4) are refused."""
    out = []
    pos = 0
    n = len(buf)
    while pos < n:
        key, pos = read_varint(buf, pos, where)
        field, wt = key >> 3, key & 7
        if field == 0:
            raise BundleError(f"{where}: protobuf field number 0")
        if wt == 0:
            v, pos = read_varint(buf, pos, where)
        elif wt == 1:
            if pos + 8 > n:
                raise BundleError(f"{where}: truncated fixed64 field {field}")
            (v,) = struct.unpack_from("<Q", buf, pos)
            pos += 8
        elif wt == 2:
            ln, pos = read_varint(buf, pos, where)
            if ln > n - pos:
                raise BundleError(f"{where}: field {field} length {ln} runs past the message")
            v = bytes(buf[pos:pos + ln])
            pos += ln
        elif wt == 5:
            if pos + 4 > n:
                raise BundleError(f"{where}: truncated fixed32 field {field}")
            (v,) = struct.unpack_from("<I", buf, pos)
            pos += 4
        else:
            raise BundleError(f"{where}: unsupported protobuf wire type {wt} (field {field})")
        out.append((field, wt, v))
    return out


def _expect(wt, want, field, where):
    if wt != want:
        raise BundleError(f"{where}: field {field} has wire type {wt}, expected {want}")


class Header:
    def __init__(self, num_shards=0, endianness=0, producer=0, min_consumer=0):
        self.num_shards, self.endianness = num_shards, endianness
        self.producer, self.min_consumer = producer, min_consumer


def parse_header(buf, where):
    h = Header()
    for field, wt, v in proto_fields(buf, where):
        if field == 1:
            _expect(wt, 0, field, where)
            h.num_shards = _signed64(v)
        elif field == 2:
            _expect(wt, 0, field, where)
            h.endianness = v
        elif field == 3:
            _expect(wt, 2, field, where)
            for f2, wt2, v2 in proto_fields(v, where + " (version)"):
                if f2 == 1 and wt2 == 0:
                    h.producer = _signed64(v2)
                elif f2 == 2 and wt2 == 0:
                    h.min_consumer = _signed64(v2)
    return h


def parse_shape(buf, where):
    dims = []
    unknown_rank = False
    for field, wt, v in proto_fields(buf, where):
        if field == 2:
            _expect(wt, 2, field, where)
            size = 0
            for f2, wt2, v2 in proto_fields(v, where):
                if f2 == 1:
                    _expect(wt2, 0, f2, where)
                    size = _signed64(v2)
            dims.append(size)
        elif field == 3:
            unknown_rank = bool(v)
    if unknown_rank or any(d < 0 for d in dims):
        raise BundleError(f"{where}: the shape is not fully known ({dims})")
    return tuple(dims)


class Entry:
    """One tensor's BundleEntryProto."""

    def __init__(self, name):
        self.name = name
        self.dtype = 0
        self.shape = ()
        self.shard_id = 0
        self.offset = 0
        self.size = 0
        self.crc32c = None  # masked, as stored
        self.n_slices = 0

    @property
    def dtype_name(self):
        return DTYPE_NAMES.get(self.dtype, f"dtype {self.dtype}")

    @property
    def n_elements(self):
        n = 1
        for d in self.shape:
            n *= d
        return n


def parse_entry(name, buf, where):
    e = Entry(name)
    w = f"{where}: tensor {name}"
    for field, wt, v in proto_fields(buf, w):
        if field == 1:
            _expect(wt, 0, field, w)
            e.dtype = v
        elif field == 2:
            _expect(wt, 2, field, w)
            e.shape = parse_shape(v, w + " (shape)")
        elif field == 3:
            _expect(wt, 0, field, w)
            e.shard_id = _signed64(v)
        elif field == 4:
            _expect(wt, 0, field, w)
            e.offset = _signed64(v)
        elif field == 5:
            _expect(wt, 0, field, w)
            e.size = _signed64(v)
        elif field == 6:
            _expect(wt, 5, field, w)
            e.crc32c = v
        elif field == 7:
            e.n_slices += 1
    if e.offset < 0 or e.size < 0 or e.shard_id < 0:
        raise BundleError(f"{w}: negative offset, size or shard id")
    return e


# ------------------------------------------------------------------------------------------
# LevelDB table

def _block_handle(buf, pos, where, limit=None):
    off, pos = read_varint(buf, pos, where, limit)
    size, pos = read_varint(buf, pos, where, limit)
    return (off, size), pos


def _read_block(data, handle, where, what):
    off, size = handle
    end = len(data) - FOOTER_LEN
    if off + size + BLOCK_TRAILER_LEN > end:
        raise BundleError(f"{where}: {what} block [{off}, {off + size}) runs past the end of "
                          f"the table ({end} bytes before the footer): truncated or corrupt")
    contents = data[off:off + size]
    ctype = data[off + size]
    (stored,) = struct.unpack_from("<I", data, off + size + 1)
    actual = crc32c(data[off:off + size + 1])
    if unmask_crc(stored) != actual:
        raise BundleError(f"{where}: {what} block at offset {off}: checksum mismatch (stored "
                          f"{unmask_crc(stored):#010x}, computed {actual:#010x}): corrupt")
    if ctype == 1:
        raise BundleError(f"{where}: {what} block at offset {off} is snappy-compressed; this "
                          "reader handles uncompressed tables only (TensorFlow writes bundle "
                          "indexes uncompressed)")
    if ctype != 0:
        raise BundleError(f"{where}: {what} block at offset {off}: unknown compression type "
                          f"{ctype}")
    return contents


def _block_entries(block, where, what):
    """[(key, value)] of one block, keys rebuilt from their shared prefixes."""
    if len(block) < 4:
        raise BundleError(f"{where}: {what} block shorter than its restart count")
    (n_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    limit = len(block) - 4 - 4 * n_restarts
    if n_restarts < 1 or limit < 0:
        raise BundleError(f"{where}: {what} block: bad restart count {n_restarts}")
    for r in range(n_restarts):
        (ro,) = struct.unpack_from("<I", block, limit + 4 * r)
        if ro > limit:
            raise BundleError(f"{where}: {what} block: restart offset {ro} past the entries")
    out = []
    pos = 0
    key = b""
    while pos < limit:
        shared, pos = read_varint(block, pos, where, limit)
        unshared, pos = read_varint(block, pos, where, limit)
        vlen, pos = read_varint(block, pos, where, limit)
        if shared > len(key) or unshared + vlen > limit - pos:
            raise BundleError(f"{where}: {what} block: entry at {pos} runs past the block")
        key = key[:shared] + bytes(block[pos:pos + unshared])
        pos += unshared
        out.append((key, bytes(block[pos:pos + vlen])))
        pos += vlen
    return out


def read_table(path):
    """[(key, value)] of a LevelDB-format table file, in file order (checked ascending)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise BundleError(f"{path}: cannot read ({e.strerror})") from None
    if len(data) < FOOTER_LEN:
        raise BundleError(f"{path}: {len(data)} bytes, shorter than a table footer: not a "
                          "TensorFlow checkpoint index (or truncated)")
    (magic,) = struct.unpack_from("<Q", data, len(data) - 8)
    if magic != TABLE_MAGIC:
        raise BundleError(f"{path}: no table magic at the end ({magic:#018x}): not a "
                          "TensorFlow checkpoint .index file (or truncated)")
    foot = len(data) - FOOTER_LEN
    _meta, pos = _block_handle(data, foot, path, len(data) - 8)
    index, _ = _block_handle(data, pos, path, len(data) - 8)
    out = []
    for sep, handle_bytes in _block_entries(_read_block(data, index, path, "index"), path,
                                            "index"):
        handle, _ = _block_handle(handle_bytes, 0, path)
        out.extend(_block_entries(_read_block(data, handle, path, "data"), path, "data"))
    for (a, _), (b, _) in zip(out, out[1:]):
        if not a < b:
            raise BundleError(f"{path}: keys out of order ({a!r} then {b!r}): corrupt")
    return out


# ------------------------------------------------------------------------------------------
# Bundle

def index_path(prefix):
    return prefix + ".index"


def data_path(prefix, shard, num_shards):
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


class Bundle:
    """A checkpoint opened by its prefix (".../model.ckpt-0"): the header and the entries are
    read at once; tensor data only by read()."""

    def __init__(self, prefix):
        if prefix.endswith(".index"):
            prefix = prefix[:-len(".index")]
        self.prefix = prefix
        self.index_file = index_path(prefix)
        rows = read_table(self.index_file)
        if not rows or rows[0][0] != b"":
            raise BundleError(f"{self.index_file}: no header entry (key \"\"): not a tensor "
                              "bundle index")
        self.header = parse_header(rows[0][1], f"{self.index_file}: header")
        h = self.header
        if h.num_shards < 1:
            raise BundleError(f"{self.index_file}: header says {h.num_shards} data shards")
        if h.endianness not in (0, 1):
            raise BundleError(f"{self.index_file}: unknown endianness {h.endianness}")
        self.entries = {}
        for key, value in rows[1:]:
            name = key.decode("utf-8", errors="backslashreplace")
            e = parse_entry(name, value, self.index_file)
            if e.n_slices == 0 and e.shard_id >= h.num_shards:
                raise BundleError(f"{self.index_file}: tensor {name}: shard {e.shard_id} of "
                                  f"{h.num_shards}")
            self.entries[name] = e

    def shard_file(self, shard):
        return data_path(self.prefix, shard, self.header.num_shards)

    def names(self):
        return list(self.entries)

    def entry(self, name):
        if name not in self.entries:
            raise BundleError(f"{self.index_file}: no tensor {name}")
        return self.entries[name]

    def check(self, name):
        """Raises unless NAME is a whole float32 tensor whose byte size matches its shape."""
        e = self.entry(name)
        where = f"{self.index_file}: tensor {name}"
        if e.n_slices:
            raise BundleError(f"{where}: stored as {e.n_slices} slices (a partitioned "
                              "variable); partitioned variables are not supported")
        if e.dtype != DT_FLOAT:
            raise BundleError(f"{where}: dtype {e.dtype_name}; only float32 (DT_FLOAT) tensors "
                              "are supported")
        if e.size != 4 * e.n_elements:
            raise BundleError(f"{where}: {e.size} bytes stored for shape {list(e.shape)} "
                              f"({4 * e.n_elements} expected)")
        if e.crc32c is None:
            raise BundleError(f"{where}: no checksum in its entry")
        return e

    def read(self, name):
        """The tensor NAME as a float32 array of its shape, its checksum verified."""
        e = self.check(name)
        path = self.shard_file(e.shard_id)
        try:
            have = os.path.getsize(path)
        except OSError as ex:
            raise BundleError(f"{path}: cannot read data shard for tensor {name} "
                              f"({ex.strerror})") from None
        if e.offset + e.size > have:
            raise BundleError(f"{path}: truncated: tensor {name} needs bytes "
                              f"[{e.offset}, {e.offset + e.size}), the shard has {have}")
        raw = np.fromfile(path, dtype=np.uint8, count=e.size, offset=e.offset)
        if raw.size != e.size:
            raise BundleError(f"{path}: truncated: short read for tensor {name}")
        got = crc32c(raw)
        if got != unmask_crc(e.crc32c):
            raise BundleError(f"{path}: tensor {name}: checksum mismatch (stored "
                              f"{unmask_crc(e.crc32c):#010x}, computed {got:#010x}): the data "
                              "is corrupt")
        order = "<" if self.header.endianness == 0 else ">"
        return raw.view(order + "f4").astype(np.float32, copy=False).reshape(e.shape)

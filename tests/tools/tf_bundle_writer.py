"""Test-side writer of TensorFlow checkpoints (the "tensor bundle" format), in plain Python and
numpy: no TensorFlow, no protobuf package. It exists so the converter's bundle reader can be
tested against files made by code written apart from it, from the format's public description:

  prefix.index                 a LevelDB-style sorted string table (SSTable) mapping
                               tensor name -> BundleEntryProto, and "" -> BundleHeaderProto
  prefix.data-0000K-of-0000N   the raw tensor bytes, one file per shard

Format, as this writer produces it (sources read: tensorflow/core/util/tensor_bundle/
tensor_bundle.cc and naming.cc, core/protobuf/tensor_bundle.proto, core/framework/
tensor_shape.proto, tensor_slice.proto, versions.proto, types.proto, core/lib/io/table_builder.cc,
block_builder.cc, format.cc, table_options.h, core/lib/strings/ordered_code.cc, LevelDB's
doc/table_format.md):

* Table file: data blocks, then an (empty) metaindex block, then the index block, then a 48-byte
  footer. Every block is followed by a 5-byte trailer: 1 byte compression type (0 = none; this
  writer never compresses, as TF's bundle writer does not) and the masked crc32c (little endian)
  of the block contents followed by that type byte.
* Block: entries "varint shared | varint unshared | varint value_len | key[shared:] | value", the
  key sharing a prefix with the previous key except at restart points (every `restart_interval`
  keys, 16 by default; index block: every key), then the restart offsets (uint32 LE each) and
  their count (uint32 LE). A data block is closed once its size estimate reaches `block_size`
  (262144 by default, TF's table option), or before an entry whose key+value is at least twice
  that.
* Index block: one entry per data block, key = a short separator that is >= every key of that
  block and < every key of the next one (the last block: a short successor of its last key),
  value = BlockHandle (varint64 offset, varint64 size, size without the trailer).
* Footer: metaindex handle, index handle, zero padding up to 40 bytes, then the magic number
  0xdb4775248b80fb57 as two little-endian uint32 (low word first).
* Keys are sorted bytewise. Key "" is the BundleHeaderProto {num_shards=1, endianness=2 (LITTLE=0
  omitted as the proto3 default), version=3 {producer=1 (=1), min_consumer=2 (0, omitted)}}.
  Every other key is a tensor name with its BundleEntryProto {dtype=1, shape=2 {repeated dim=2
  {size=1}}, shard_id=3, offset=4, size=5, crc32c=6 (fixed32), slices=7}. Fields holding their
  proto3 default (0) are left out, as a protobuf serializer does: shard 0 / offset 0 have no
  field; shape is always written (a scalar has an empty shape message).
* crc32c is CRC-32C (Castagnoli, reflected polynomial 0x82F63B78); every stored crc is masked:
  ((crc >> 15) | (crc << 17)) + 0xa282ead8, modulo 2^32.
* Data files: each tensor's bytes in row-major order, little endian (the header says LITTLE).
  Choice here: tensors go to shard `i % num_shards` in the order of the `tensors` dict, and each
  shard holds its tensors in that order (like TF, which writes in the order of its Add calls, not
  in key order), with no padding between tensors by default (`align=1`, TF's default
  data_alignment); `align=N` pads each tensor's end to a multiple of N bytes with zeros, as TF's
  writer does when asked for an alignment.
* Partitioned variables (`slices`): the full name's entry has dtype, full shape and one
  TensorSliceProto per part (extent {start=1, length=2}; an empty extent for a dimension taken
  whole) and no data fields; each part is stored as an ordinary entry under TF's encoded slice
  key (OrderedCode: number 0, the name, the rank, then start and length of every dimension as
  signed numbers, with start 0 and length -1 for a whole dimension), which starts with a 0x00 byte.

The public entry point is `write_bundle`; crc32c, masked_crc32c, encode_varint and the
protobuf helpers are exported for the self-test."""
import os

import numpy as np

DT_FLOAT = 1
DT_DOUBLE = 2
DT_INT32 = 3
DT_INT64 = 9
DT_BFLOAT16 = 14
DT_HALF = 19

_DTYPE_OF = {
    np.dtype(np.float32): DT_FLOAT,
    np.dtype(np.float64): DT_DOUBLE,
    np.dtype(np.int32): DT_INT32,
    np.dtype(np.int64): DT_INT64,
    np.dtype(np.float16): DT_HALF,
}

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
BLOCK_TRAILER_SIZE = 5


# ---------------------------------------------------------------------------------------------
# CRC-32C

def _make_crc_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _make_crc_table()


def crc32c(data, crc=0):
    """CRC-32C of DATA (bytes-like), continuing from CRC (the crc32c of what came before);
    table-driven, a byte at a time (about 10 MB/s: test tensors are small)."""
    t = _CRC_TABLE
    c = crc ^ 0xFFFFFFFF
    for x in bytes(data):
        c = t[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def mask_crc(crc):
    """TF/LevelDB's stored form of a crc: rotated right by 15 bits plus a constant."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def masked_crc32c(data):
    return mask_crc(crc32c(data))


# ---------------------------------------------------------------------------------------------
# protobuf wire format (proto3, by hand)

def encode_varint(n):
    """Base-128 varint, low group first; a negative int64 is written as its 64-bit two's
    complement (10 bytes), as protobuf does."""
    if n < 0:
        n += 1 << 64
    if n < 0 or n >= 1 << 64:
        raise ValueError(f"varint out of range: {n}")
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field, wire_type):
    return encode_varint((field << 3) | wire_type)


def pb_varint(field, value, keep_default=False):
    """Field FIELD as a varint (wire type 0); left out when 0 (the proto3 default)."""
    if value == 0 and not keep_default:
        return b""
    return _key(field, 0) + encode_varint(value)


def pb_fixed32(field, value):
    if value == 0:
        return b""
    return _key(field, 5) + int(value).to_bytes(4, "little")


def pb_bytes(field, payload):
    """Field FIELD as length-delimited bytes (wire type 2): a nested message or a string."""
    return _key(field, 2) + encode_varint(len(payload)) + bytes(payload)


def header_proto(num_shards, endianness=0, producer=1):
    """BundleHeaderProto."""
    version = pb_varint(1, producer)  # VersionDef.producer; min_consumer 0 is the default
    return pb_varint(1, num_shards) + pb_varint(2, endianness) + pb_bytes(3, version)


def shape_proto(shape):
    """TensorShapeProto: one `dim` message (field 2) per dimension, each {size = 1}."""
    return b"".join(pb_bytes(2, pb_varint(1, int(d))) for d in shape)


def slice_proto(extents):
    """TensorSliceProto; EXTENTS: per dimension None (whole) or (start, length)."""
    out = b""
    for e in extents:
        if e is None:
            out += pb_bytes(1, b"")
        else:
            start, length = e
            # `length` sits in a oneof, so it is written even when 0
            out += pb_bytes(1, pb_varint(1, start) + pb_varint(2, length, keep_default=True))
    return out


def entry_proto(dtype, shape, shard_id=0, offset=0, size=0, crc=0, slices=()):
    """BundleEntryProto, fields in number order, proto3 defaults left out."""
    return (pb_varint(1, dtype) + pb_bytes(2, shape_proto(shape)) + pb_varint(3, shard_id)
            + pb_varint(4, offset) + pb_varint(5, size) + pb_fixed32(6, crc)
            + b"".join(pb_bytes(7, slice_proto(s)) for s in slices))


# ---------------------------------------------------------------------------------------------
# OrderedCode (the keys of the parts of a partitioned variable)

def _oc_num_increasing(v):
    body = v.to_bytes((v.bit_length() + 7) // 8, "big") if v else b""
    return bytes([len(body)]) + body


def _oc_escape(s):
    out = bytearray()
    for b in s:
        if b == 0x00:
            out += b"\x00\xff"
        elif b == 0xFF:
            out += b"\xff\x00"
        else:
            out.append(b)
    return bytes(out)


def _oc_signed_increasing(v):
    # length L in bytes holds a value of up to 7L-1 bits; the first L bits of the encoding are
    # the sign bit and L-1 size bits (all 1 for v >= 0, all 0 for v < 0), then the payload in
    # big-endian two's complement
    x = ~v if v < 0 else v
    length = x.bit_length() // 7 + 1
    nbits = 8 * length
    raw = v & ((1 << nbits) - 1)
    header = ((1 << length) - 1) << (nbits - length)
    return (raw ^ header).to_bytes(length, "big")


def slice_key(name, extents):
    """TF's key of one stored part of a partitioned tensor."""
    out = _oc_num_increasing(0) + _oc_escape(name.encode()) + b"\x00\x01"
    out += _oc_num_increasing(len(extents))
    for e in extents:
        start, length = (0, -1) if e is None else e
        out += _oc_signed_increasing(start) + _oc_signed_increasing(length)
    return out


# ---------------------------------------------------------------------------------------------
# SSTable

class _Block:
    def __init__(self, restart_interval):
        self.interval = restart_interval
        self.buf = bytearray()
        self.restarts = [0]
        self.count = 0  # entries since the last restart
        self.last = b""
        self.n = 0

    def add(self, key, value):
        shared = 0
        if self.count < self.interval:
            m = min(len(key), len(self.last))
            while shared < m and key[shared] == self.last[shared]:
                shared += 1
        else:
            self.restarts.append(len(self.buf))
            self.count = 0
        self.buf += encode_varint(shared) + encode_varint(len(key) - shared)
        self.buf += encode_varint(len(value)) + key[shared:] + value
        self.last = key
        self.count += 1
        self.n += 1

    def size_estimate(self):
        return len(self.buf) + 4 * len(self.restarts) + 4

    def finish(self):
        tail = b"".join(r.to_bytes(4, "little") for r in self.restarts)
        return bytes(self.buf) + tail + len(self.restarts).to_bytes(4, "little")


def _separator(a, b):
    """A short key k with a <= k < b (a < b): TF's shortest-separator rule."""
    i = 0
    m = min(len(a), len(b))
    while i < m and a[i] == b[i]:
        i += 1
    if i < m and a[i] < 0xFF and a[i] + 1 < b[i]:
        return a[:i] + bytes([a[i] + 1])
    return a


def _successor(a):
    """A short key k >= a: the first byte that is not 0xff, plus one, and nothing after it."""
    for i, c in enumerate(a):
        if c != 0xFF:
            return a[:i] + bytes([c + 1])
    return a


def build_table(items, block_size=262144, restart_interval=16, corrupt_block=False):
    """The bytes of an SSTable holding ITEMS (a list of (key bytes, value bytes) in strictly
    increasing key order). CORRUPT_BLOCK: flip one byte of the first data block after its
    checksum is taken (a test of the reader's block checksum)."""
    out = bytearray()
    index = _Block(1)

    def put_block(contents, corrupt=False):
        offset = len(out)
        trailer_type = b"\x00"
        crc = masked_crc32c(contents + trailer_type)
        if corrupt:
            contents = bytearray(contents)
            contents[len(contents) // 2] ^= 0x5A
        out.extend(contents)
        out.extend(trailer_type + crc.to_bytes(4, "little"))
        return offset, len(contents)

    block = _Block(restart_interval)
    pending = None  # handle of the last written data block, waiting for its index key
    last_key = None
    first_block = [True]

    def flush():
        nonlocal block, pending
        if block.n == 0:
            return
        pending = put_block(block.finish(), corrupt_block and first_block[0])
        first_block[0] = False
        block = _Block(restart_interval)

    def handle(h):
        return encode_varint(h[0]) + encode_varint(h[1])

    for key, value in items:
        if last_key is not None:
            if key <= last_key:
                raise ValueError(f"keys not in increasing order: {last_key!r} then {key!r}")
            if len(key) + len(value) >= 2 * block_size:
                flush()
        if pending is not None:
            index.add(_separator(last_key, key), handle(pending))
            pending = None
        block.add(key, value)
        last_key = key
        if block.size_estimate() >= block_size:
            flush()
    flush()
    meta_handle = put_block(_Block(restart_interval).finish())
    if pending is not None:
        index.add(_successor(last_key), handle(pending))
    index_handle = put_block(index.finish())
    footer = handle(meta_handle) + handle(index_handle)
    footer += b"\x00" * (40 - len(footer))
    footer += (TABLE_MAGIC & 0xFFFFFFFF).to_bytes(4, "little")
    footer += (TABLE_MAGIC >> 32).to_bytes(4, "little")
    out.extend(footer)
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# the bundle

def data_filename(prefix, shard, num_shards):
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


def _split_rows(rows, parts):
    bounds = [round(rows * k / parts) for k in range(parts + 1)]
    return [(bounds[k], bounds[k + 1] - bounds[k]) for k in range(parts)
            if bounds[k + 1] > bounds[k]]


def write_bundle(prefix, tensors, num_shards=1, *, corrupt_crc=None, truncate_shard=None,
                 dtype_override=None, slices=None, align=1, block_size=262144,
                 restart_interval=16, big_endian=False, corrupt_index_block=False):
    """Writes PREFIX.index and PREFIX.data-0000K-of-0000N (K < NUM_SHARDS) holding TENSORS
    (dict name -> numpy array: float32, float64, int32, int64 or float16; the dtype is recorded
    as TF's DT_* code of the array's dtype).

    Faults, for the reader's error tests:
      corrupt_crc=NAME        one byte of NAME's data flipped after its checksum was taken
      truncate_shard=K        shard K cut short: the last non-empty tensor in it loses half its
                              bytes (at least one); the manifest's "truncated" names it
      dtype_override={NAME: DT}  NAME's entry records dtype DT (the data stays as given)
      slices={NAME: P}        NAME saved as a partitioned variable of P parts along axis 0 (a
                              full entry with `slices` and one entry per part under TF's slice
                              key); a reader that does not assemble parts must refuse it
      corrupt_index_block     one byte of the index file's first data block flipped after its
                              block checksum was taken
    Layout options: align (pad each tensor's end to a multiple), block_size and
    restart_interval (of the table), big_endian (data in big-endian order, header BIG=1).

    Returns a manifest: {"index": path, "shards": [paths], "entries": {key: {...}},
    "truncated": name or None}; entries maps each table key (str for names, bytes for slice
    keys) to its dtype, shape, shard, offset, size and stored (masked) crc32c."""
    tensors = dict(tensors)
    dtype_override = dict(dtype_override or {})
    slices = dict(slices or {})
    if "" in tensors:
        raise ValueError("the empty name is the header's key")
    for name in [corrupt_crc, *dtype_override, *slices]:
        if name is not None and name not in tensors:
            raise KeyError(f"no tensor named {name!r}")
    if num_shards < 1:
        raise ValueError("num_shards must be >= 1")
    if truncate_shard is not None and not 0 <= truncate_shard < num_shards:
        raise ValueError(f"no shard {truncate_shard}")

    # what gets stored: (table key, array, logical name for faults)
    stored = []
    full_entries = {}
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        if arr.dtype not in _DTYPE_OF:
            raise TypeError(f"{name}: dtype {arr.dtype} not supported by this writer")
        if name in slices:
            if arr.ndim == 0:
                raise ValueError(f"{name}: a scalar cannot be partitioned")
            parts = _split_rows(arr.shape[0], int(slices[name]))
            rest = [None] * (arr.ndim - 1)
            exts = [[(s, n)] + rest for s, n in parts]
            full_entries[name] = (arr, exts)
            for (s, n), ext in zip(parts, exts):
                stored.append((slice_key(name, ext), arr[s:s + n], name))
        else:
            stored.append((name.encode(), arr, name))

    shard_bufs = [bytearray() for _ in range(num_shards)]
    entries = {}
    values = {}
    last_in_shard = [None] * num_shards
    for i, (key, arr, name) in enumerate(stored):
        shard = i % num_shards
        buf = shard_bufs[shard]
        dt = arr.dtype.newbyteorder(">" if big_endian else "<")
        data = np.ascontiguousarray(arr, dtype=dt).tobytes()
        offset = len(buf)
        crc = masked_crc32c(data)
        if name == corrupt_crc:
            if not data:
                raise ValueError(f"{name} has no bytes to corrupt")
            data = bytearray(data)
            data[len(data) // 2] ^= 0xFF
            data = bytes(data)
        buf += data
        if align > 1 and len(buf) % align:
            buf += b"\x00" * (align - len(buf) % align)
        dtype = dtype_override.get(name, _DTYPE_OF[arr.dtype])
        shape = [int(d) for d in arr.shape]
        values[key] = entry_proto(dtype, shape, shard, offset, len(data), crc)
        ekey = key.decode() if key == name.encode() else key
        entries[ekey] = {"dtype": dtype, "shape": shape, "shard": shard, "offset": offset,
                         "size": len(data), "crc32c": crc}
        if data:
            last_in_shard[shard] = (ekey, offset, len(data))
    for name, (arr, exts) in full_entries.items():
        dtype = dtype_override.get(name, _DTYPE_OF[arr.dtype])
        shape = [int(d) for d in arr.shape]
        values[name.encode()] = entry_proto(dtype, shape, slices=exts)
        entries[name] = {"dtype": dtype, "shape": shape, "slices": exts}

    truncated = None
    if truncate_shard is not None:
        last = last_in_shard[truncate_shard]
        if last is None:
            raise ValueError(f"shard {truncate_shard} holds no bytes to cut")
        key, offset, size = last
        del shard_bufs[truncate_shard][offset + size - max(1, size // 2):]
        truncated = key

    items = [(b"", header_proto(num_shards, 1 if big_endian else 0))]
    items += sorted(values.items())
    table = build_table(items, block_size, restart_interval, corrupt_index_block)

    d = os.path.dirname(os.path.abspath(prefix))
    os.makedirs(d, exist_ok=True)
    shards = []
    for k, buf in enumerate(shard_bufs):
        path = data_filename(prefix, k, num_shards)
        with open(path, "wb") as f:
            f.write(buf)
        shards.append(path)
    with open(prefix + ".index", "wb") as f:
        f.write(table)
    return {"index": prefix + ".index", "shards": shards, "entries": entries,
            "truncated": truncated}

"""Self-test of the test-side TensorFlow checkpoint writer (tf_bundle_writer.py) and the authors'
TF variable list (authors_tf_layout.py): published CRC-32C and protobuf vectors, and a minimal
walk of the written table written here (footer, block handles, block checksums, restart arrays,
index separators) that must give back exactly what was written."""
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import authors_tf_layout as layout  # noqa: E402
import tf_bundle_writer as w  # noqa: E402


# ---------------------------------------------------------------------------------------------
# primitives against published vectors

def test_crc32c_vectors():
    assert w.crc32c(b"123456789") == 0xE3069283  # the CRC catalogue's check value
    assert w.crc32c(b"") == 0
    # RFC 3720 (iSCSI) appendix B.4
    assert w.crc32c(bytes(32)) == 0x8A9136AA
    assert w.crc32c(b"\xff" * 32) == 0x62A8AB43
    assert w.crc32c(bytes(range(32))) == 0x46DD794E
    assert w.crc32c(bytes(range(31, -1, -1))) == 0x113FDB5C
    data = os.urandom(1000)
    assert w.crc32c(data[300:], w.crc32c(data[:300])) == w.crc32c(data)


def _unmask(m):
    rot = (m - 0xA282EAD8) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


def test_crc_mask():
    assert w.mask_crc(0) == 0xA282EAD8
    assert w.mask_crc(1) == (0x00020000 + 0xA282EAD8) & 0xFFFFFFFF  # 1 rotated right by 15
    for crc in (0xE3069283, 0xFFFFFFFF, 0x80000000, 0x12345678):
        assert _unmask(w.mask_crc(crc)) == crc


def test_varint():
    assert w.encode_varint(0) == b"\x00"
    assert w.encode_varint(1) == b"\x01"
    assert w.encode_varint(127) == b"\x7f"
    assert w.encode_varint(128) == b"\x80\x01"
    assert w.encode_varint(300) == b"\xac\x02"  # the protobuf encoding guide's example
    assert w.encode_varint(2**32) == b"\x80\x80\x80\x80\x10"
    assert w.encode_varint(2**64 - 1) == b"\xff" * 9 + b"\x01"
    assert w.encode_varint(-1) == b"\xff" * 9 + b"\x01"  # int64 -1: ten bytes
    with pytest.raises(ValueError):
        w.encode_varint(2**64)


def test_protobuf_fields():
    assert w.pb_varint(1, 150) == b"\x08\x96\x01"  # the protobuf guide's Test1 {a: 150}
    assert w.pb_bytes(2, b"testing") == b"\x12\x07testing"  # its Test2 {b: "testing"}
    assert w.pb_varint(3, 0) == b""  # proto3 default: not written
    assert w.pb_fixed32(6, 0x01020304) == b"\x35\x04\x03\x02\x01"
    # TensorShapeProto [3, 0]: dim {size: 3}, dim {}
    assert w.shape_proto([3, 0]) == b"\x12\x02\x08\x03\x12\x00"
    assert w.header_proto(1) == b"\x08\x01\x1a\x02\x08\x01"


def test_ordered_code():
    # examples of tensorflow/core/lib/strings/ordered_code.cc
    assert w._oc_signed_increasing(0x424242) == b"\xf0\x42\x42\x42"
    assert w._oc_signed_increasing(-0x800) == b"\x38\x00"
    assert w._oc_signed_increasing(0) == b"\x80"
    assert w._oc_signed_increasing(-1) == b"\x7f"
    assert w._oc_signed_increasing(63) == b"\xbf"
    assert w._oc_signed_increasing(-64) == b"\x40"
    assert len(w._oc_signed_increasing(64)) == 2
    # increasing numbers give increasing codes
    vals = [-70000, -8193, -65, -64, -1, 0, 1, 63, 64, 8191, 8192, 70000, 2**40]
    codes = [w._oc_signed_increasing(v) for v in vals]
    assert codes == sorted(codes)
    assert w._oc_num_increasing(0) == b"\x00"
    assert w._oc_num_increasing(0x1234) == b"\x02\x12\x34"


# ---------------------------------------------------------------------------------------------
# a minimal table walk, written here from the format description

def _varint(buf, pos):
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, pos


def _read_block(data, offset, size):
    assert 0 <= offset and offset + size + 5 <= len(data) - 48, "block handle outside the file"
    contents = data[offset:offset + size]
    btype = data[offset + size]
    stored = int.from_bytes(data[offset + size + 1:offset + size + 5], "little")
    assert btype == 0, "compressed block"
    assert _unmask(stored) == w.crc32c(contents + bytes([btype])), "block checksum"
    return contents


def _block_entries(block, restart_interval):
    n_restarts = int.from_bytes(block[-4:], "little")
    assert n_restarts >= 1
    limit = len(block) - 4 - 4 * n_restarts
    restarts = [int.from_bytes(block[limit + 4 * i:limit + 4 * i + 4], "little")
                for i in range(n_restarts)]
    assert restarts[0] == 0 and restarts == sorted(restarts)
    entries, starts = [], []
    pos, key = 0, b""
    while pos < limit:
        starts.append(pos)
        shared, pos = _varint(block, pos)
        unshared, pos = _varint(block, pos)
        vlen, pos = _varint(block, pos)
        assert shared <= len(key)
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        entries.append((key, block[pos:pos + vlen], shared))
        pos += vlen
    assert pos == limit
    # restart points: exactly every RESTART_INTERVAL-th entry, each storing its whole key
    expect = [starts[i] for i in range(0, len(starts), restart_interval)] or [0]
    assert restarts == expect
    for i, (_, _, shared) in enumerate(entries):
        if i % restart_interval == 0:
            assert shared == 0
    return [(k, v) for k, v, _ in entries]


def walk_table(data, restart_interval=16):
    """[(key, value)] of an SSTable, checking its structure on the way."""
    assert len(data) >= 48
    footer = data[-48:]
    assert int.from_bytes(footer[40:44], "little") == 0x8B80FB57
    assert int.from_bytes(footer[44:48], "little") == 0xDB477524
    meta_off, p = _varint(footer, 0)
    meta_size, p = _varint(footer, p)
    index_off, p = _varint(footer, p)
    index_size, p = _varint(footer, p)
    assert footer[p:40] == bytes(40 - p)
    assert _block_entries(_read_block(data, meta_off, meta_size), restart_interval) == []
    index = _block_entries(_read_block(data, index_off, index_size), 1)
    items = []
    prev_sep = None
    block_ends = []
    for sep, handle in index:
        off, q = _varint(handle, 0)
        size, q = _varint(handle, q)
        assert q == len(handle)
        block_ends.append((off, off + size + 5))
        block = _block_entries(_read_block(data, off, size), restart_interval)
        assert block, "empty data block"
        assert block[-1][0] <= sep, "index key below its block's last key"
        if prev_sep is not None:
            assert prev_sep < block[0][0], "index key of the block before not below this block"
        prev_sep = sep
        items += block
    # data blocks tile the start of the file in order
    pos = 0
    for start, end in block_ends:
        assert start == pos
        pos = end
    assert meta_off == pos
    keys = [k for k, _ in items]
    assert keys == sorted(set(keys))
    return items


@pytest.mark.parametrize("block_size,interval", [(262144, 16), (64, 16), (200, 4), (1, 1)])
def test_table_round_trip(block_size, interval):
    rng = np.random.default_rng(block_size)
    keys = sorted({("transformer/layer_%d/%s" % (rng.integers(0, 30), s)).encode()
                   for s in ("a", "ab", "abc", "ff/layer_1/kernel", "rel_attn/qkv/kernel",
                             "zz\xff") for _ in range(6)})
    keys = [b""] + keys + [b"\xff\xff", b"\xff\xff\x01"]
    items = [(k, bytes(rng.integers(0, 256, rng.integers(0, 40), dtype=np.uint8)))
             for k in keys]
    data = w.build_table(items, block_size=block_size, restart_interval=interval)
    assert walk_table(data, interval) == items
    if block_size <= 200:  # several data blocks
        n_blocks = len(walk_table_index(data))
        assert n_blocks > 1


def walk_table_index(data):
    footer = data[-48:]
    _, p = _varint(footer, 0)
    _, p = _varint(footer, p)
    off, p = _varint(footer, p)
    size, p = _varint(footer, p)
    return _block_entries(_read_block(data, off, size), 1)


def test_table_rejects_unsorted():
    with pytest.raises(ValueError):
        w.build_table([(b"b", b""), (b"a", b"")])


def test_separators():
    assert w._separator(b"the quick brown fox", b"the who") == b"the r"
    assert w._separator(b"abc", b"abcd") == b"abc"  # a prefix: unchanged
    assert w._separator(b"ab", b"ac") == b"ab"  # no room between
    assert w._successor(b"abc") == b"b"
    assert w._successor(b"\xff\xffa") == b"\xff\xffb"
    assert w._successor(b"\xff") == b"\xff"


# ---------------------------------------------------------------------------------------------
# bundles

def _fields(msg):
    """{field: [values]} of a protobuf message (varint, fixed32 and length-delimited only)."""
    out, pos = {}, 0
    while pos < len(msg):
        key, pos = _varint(msg, pos)
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = _varint(msg, pos)
        elif wt == 5:
            v, pos = int.from_bytes(msg[pos:pos + 4], "little"), pos + 4
        elif wt == 2:
            n, pos = _varint(msg, pos)
            v, pos = msg[pos:pos + n], pos + n
        else:
            raise AssertionError(f"wire type {wt}")
        out.setdefault(field, []).append(v)
    return out


def _entry(value):
    f = _fields(value)
    shape = [(_fields(d).get(1, [0])[0]) for d in _fields(f[2][0]).get(2, [])] if 2 in f else None
    return {"dtype": f.get(1, [0])[0], "shape": shape, "shard": f.get(3, [0])[0],
            "offset": f.get(4, [0])[0], "size": f.get(5, [0])[0], "crc": f.get(6, [0])[0],
            "slices": f.get(7, [])}


def _tensors():
    rng = np.random.default_rng(5)
    t = {f"transformer/layer_{i}/ff/layer_1/kernel": rng.standard_normal((3, 5 + i))
         .astype(np.float32) for i in range(12)}
    t["transformer/r_w_bias"] = rng.standard_normal((2, 4)).astype(np.float32)
    t["transformer/adaptive_softmax/bias"] = rng.standard_normal(7).astype(np.float32)
    t["scalar"] = np.array(2.5, dtype=np.float32)
    t["empty"] = np.zeros((0, 3), dtype=np.float32)
    t["steps"] = np.arange(6, dtype=np.int32).reshape(2, 3)
    t["wide"] = rng.standard_normal((4,)).astype(np.float64)
    return t


def _read_bundle(prefix, man):
    items = walk_table(open(prefix + ".index", "rb").read())
    assert items[0][0] == b""
    header = _fields(items[0][1])
    shards = [open(p, "rb").read() for p in man["shards"]]
    return header, {k: _entry(v) for k, v in items[1:]}, shards


@pytest.mark.parametrize("num_shards,align", [(1, 1), (3, 1), (4, 64)])
def test_bundle_round_trip(tmp_path, num_shards, align):
    t = _tensors()
    prefix = str(tmp_path / "model.ckpt-0")
    man = w.write_bundle(prefix, t, num_shards, align=align, block_size=256)
    assert [os.path.basename(p) for p in man["shards"]] == [
        f"model.ckpt-0.data-{k:05d}-of-{num_shards:05d}" for k in range(num_shards)]
    header, entries, shards = _read_bundle(prefix, man)
    assert header[1] == [num_shards] and 2 not in header
    assert _fields(header[3][0]) == {1: [1]}  # version {producer: 1}
    assert sorted(entries) == sorted(k.encode() for k in t)
    dt = {np.dtype(np.float32): 1, np.dtype(np.float64): 2, np.dtype(np.int32): 3}
    used = set()
    for name, arr in t.items():
        e = entries[name.encode()]
        assert e["dtype"] == dt[arr.dtype] and e["shape"] == list(arr.shape)
        assert not e["slices"]
        raw = shards[e["shard"]][e["offset"]:e["offset"] + e["size"]]
        assert e["size"] == arr.nbytes and len(raw) == arr.nbytes
        assert _unmask(e["crc"]) == w.crc32c(raw)  # crc32c(b"") == 0 for the empty one
        np.testing.assert_array_equal(np.frombuffer(raw, arr.dtype.newbyteorder("<"))
                                      .reshape(arr.shape), arr)
        if align > 1:
            assert e["offset"] % align == 0
        used.add(e["shard"])
    assert used == set(range(num_shards))


def test_bundle_faults(tmp_path):
    t = _tensors()
    bad = "transformer/layer_3/ff/layer_1/kernel"
    prefix = str(tmp_path / "c")
    man = w.write_bundle(prefix, t, 2, corrupt_crc=bad, dtype_override={"steps": 1})
    _, entries, shards = _read_bundle(prefix, man)
    for name in t:
        e = entries[name.encode()]
        raw = shards[e["shard"]][e["offset"]:e["offset"] + e["size"]]
        assert (_unmask(e["crc"]) == w.crc32c(raw)) == (name != bad), name
    assert entries[b"steps"]["dtype"] == 1  # DT_FLOAT recorded over int32 data

    prefix = str(tmp_path / "t")
    man = w.write_bundle(prefix, t, 3, truncate_shard=1)
    _, entries, shards = _read_bundle(prefix, man)
    cut = entries[man["truncated"].encode()]
    assert cut["shard"] == 1 and cut["offset"] < len(shards[1]) < cut["offset"] + cut["size"]
    for name in t:
        e = entries[name.encode()]
        if name != man["truncated"]:
            assert e["offset"] + e["size"] <= len(shards[e["shard"]])


def test_bundle_index_block_corruption(tmp_path):
    prefix = str(tmp_path / "b")
    w.write_bundle(prefix, _tensors(), corrupt_index_block=True)
    with pytest.raises(AssertionError, match="block checksum"):
        walk_table(open(prefix + ".index", "rb").read())


def test_bundle_big_endian(tmp_path):
    t = {"x": np.arange(5, dtype=np.float32)}
    prefix = str(tmp_path / "be")
    man = w.write_bundle(prefix, t, big_endian=True)
    header, entries, shards = _read_bundle(prefix, man)
    assert header[2] == [1]
    e = entries[b"x"]
    raw = shards[0][e["offset"]:e["offset"] + e["size"]]
    np.testing.assert_array_equal(np.frombuffer(raw, ">f4"), t["x"])
    assert _unmask(e["crc"]) == w.crc32c(raw)


def test_bundle_partitioned(tmp_path):
    t = _tensors()
    name = "transformer/layer_0/ff/layer_1/kernel"  # shape (3, 5)
    prefix = str(tmp_path / "p")
    man = w.write_bundle(prefix, t, 2, slices={name: 2})
    _, entries, shards = _read_bundle(prefix, man)
    full = entries[name.encode()]
    assert full["shape"] == [3, 5] and full["size"] == 0 and len(full["slices"]) == 2
    extents = [[_fields(e) for e in _fields(s)[1]] for s in full["slices"]]
    assert extents == [[{2: [2]}, {}], [{1: [2], 2: [1]}, {}]]  # rows [0,2) and [2,3)
    part_keys = sorted(k for k in entries if k.startswith(b"\x00"))
    # OrderedCode: 0, the name, rank 2, then start/length per dimension (0/-1: whole)
    head = b"\x00" + name.encode() + b"\x00\x01" + b"\x01\x02"
    assert part_keys == sorted([head + b"\x80\x82\x80\x7f", head + b"\x82\x81\x80\x7f"])
    rows = []
    for k in (head + b"\x80\x82\x80\x7f", head + b"\x82\x81\x80\x7f"):
        e = entries[k]
        raw = shards[e["shard"]][e["offset"]:e["offset"] + e["size"]]
        assert _unmask(e["crc"]) == w.crc32c(raw)
        rows.append(np.frombuffer(raw, "<f4").reshape(e["shape"]))
    np.testing.assert_array_equal(np.concatenate(rows), t[name])
    assert man["entries"][name]["slices"] == [[(0, 2), None], [(2, 1), None]]


def test_bundle_argument_errors(tmp_path):
    with pytest.raises(KeyError):
        w.write_bundle(str(tmp_path / "x"), {"a": np.zeros(2, np.float32)}, corrupt_crc="b")
    with pytest.raises(TypeError):
        w.write_bundle(str(tmp_path / "x"), {"a": np.zeros(2, np.uint8)})
    with pytest.raises(ValueError):
        w.write_bundle(str(tmp_path / "x"), {"a": np.zeros(2, np.float32)}, truncate_shard=1)


# ---------------------------------------------------------------------------------------------
# the authors' variable list

def _names(cfg, **kw):
    return dict(layout.authors_tf_names(cfg, **kw))


SMALL = dict(n_layer=2, d_model=16, d_embed=16, n_head=2, d_head=8, d_inner=32)


def test_authors_names_char_model():
    # enwik8/text8-like: no cutoffs, div_val 1, tied r biases
    v = _names(dict(SMALL, n_token=204))
    assert v["transformer/r_w_bias"] == (2, 8) and v["transformer/r_r_bias"] == (2, 8)
    assert v["transformer/adaptive_embed/lookup_table"] == (204, 16)
    assert "transformer/adaptive_embed/proj_W" not in v
    assert v["transformer/adaptive_softmax/bias"] == (204,)
    assert v["transformer/layer_1/rel_attn/qkv/kernel"] == (16, 48)
    assert v["transformer/layer_1/rel_attn/r/kernel"] == (16, 16)
    assert v["transformer/layer_1/rel_attn/o/kernel"] == (16, 16)
    assert v["transformer/layer_0/ff/layer_1/kernel"] == (16, 32)
    assert v["transformer/layer_0/ff/layer_2/bias"] == (16,)
    assert v["transformer/layer_0/ff/LayerNorm/gamma"] == (16,)
    assert len(v) == 2 + 1 + 1 + 2 * 11
    v = _names(dict(SMALL, n_token=27, d_embed=12, untie_r=True))
    assert v["transformer/adaptive_embed/proj_W"] == (12, 16)
    assert v["transformer/r_r_bias"] == (2, 2, 8)


def test_authors_names_adaptive():
    # wt103-like: div_val 4, projections shared but the first, proj_same_dim
    cfg = dict(SMALL, n_token=100, cutoffs=[20, 40, 60], div_val=2, untie_r=True,
               proj_share_all_but_first=True)
    v = _names(cfg)
    sizes = [20, 20, 20, 40]
    for i in range(4):
        assert v[f"transformer/adaptive_embed/cutoff_{i}/lookup_table"] == (sizes[i], 16 >> i)
        assert v[f"transformer/adaptive_embed/cutoff_{i}/proj_W"] == (16 >> i, 16)
        assert v[f"transformer/adaptive_softmax/cutoff_{i}/b"] == (sizes[i],)
    assert v["transformer/adaptive_softmax/cutoff_0/proj"] == (16, 16)  # bin 0 never tied
    assert not any(f"adaptive_softmax/cutoff_{i}/proj" in n for n in v for i in (1, 2, 3))
    assert v["transformer/adaptive_softmax/cutoff_0/cluster_W"] == (3, 16)
    assert v["transformer/adaptive_softmax/cutoff_0/cluster_b"] == (3,)
    # lm1b-like: nothing shared, proj_same_dim False: bin 0 has no projection anywhere
    v = _names(dict(cfg, proj_share_all_but_first=False, proj_same_dim=False))
    assert "transformer/adaptive_embed/cutoff_0/proj_W" not in v
    assert "transformer/adaptive_softmax/cutoff_0/proj" not in v
    for i in (1, 2, 3):
        assert v[f"transformer/adaptive_softmax/cutoff_{i}/proj"] == (16 >> i, 16)
    # div_val 1 with cutoffs: one table, sliced by the softmax
    v = _names(dict(SMALL, n_token=100, cutoffs=[50]))
    assert v["transformer/adaptive_embed/lookup_table"] == (100, 16)
    assert "transformer/adaptive_softmax/cutoff_0/proj" not in v
    assert v["transformer/adaptive_softmax/cutoff_1/b"] == (50,)


def test_authors_training_state_and_weights(tmp_path):
    cfg = dict(SMALL, n_token=30)
    plain = layout.authors_tf_names(cfg)
    full = dict(layout.authors_tf_names(cfg, training_state=True))
    assert len(full) == 3 * len(plain) + 3
    assert full["global_step"] == () and full["transformer/r_w_bias/Adam_1"] == (2, 8)
    weights = layout.authors_tf_random_weights(cfg, seed=1, training_state=True)
    assert weights["global_step"].dtype == np.int64
    prefix = str(tmp_path / "model.ckpt-0")
    man = w.write_bundle(prefix, weights)
    items = walk_table(open(prefix + ".index", "rb").read())
    assert len(items) == len(weights) + 1  # the header and every variable
    assert man["entries"]["global_step"]["dtype"] == 9  # DT_INT64


def test_sota_flags_cover_the_released_models():
    for name, flags in layout.SOTA_FLAGS.items():
        v = _names(dict(flags, n_token=1000 if not flags["cutoffs"] else 700000))
        assert "transformer/r_w_bias" in v, name

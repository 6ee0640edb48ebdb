"""safetensors read/write with numpy only (no torch, no safetensors package).

Format: 8-byte little-endian header length N, N bytes of JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the raw
little-endian tensor bytes, offsets relative to the end of the header.
"""
import json
import struct

import numpy as np

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64,
           "I32": np.int32, "U8": np.uint8}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def _bf16_to_f32(raw):
    u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
    return u16.view(np.float32)


def f32_to_bf16_bytes(a):
    """Round-to-nearest-even float32 -> bfloat16, as raw little-endian bytes."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


def write(path, tensors, metadata=None, dtype_override=None):
    """tensors: {name: np.ndarray}. dtype_override: {name: "BF16"} to store bf16."""
    dtype_override = dtype_override or {}
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        if dtype_override.get(name) == "BF16":
            raw, dt = f32_to_bf16_bytes(arr), "BF16"
        else:
            arr = np.ascontiguousarray(arr)
            if arr.dtype not in _NAMES:
                raise ValueError(f"{name}: unsupported dtype {arr.dtype}")
            dt = _NAMES[arr.dtype]
            raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * ((8 - len(hjson) % 8) % 8)  # align the data section to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for raw in blobs:
            f.write(raw)


def read(path):
    """Returns ({name: float32/int ndarray}, metadata). BF16/F16 become float32."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        raw = data[base + b:base + e]
        if info["dtype"] == "BF16":
            arr = _bf16_to_f32(raw)
        else:
            arr = np.frombuffer(raw, dtype=np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<"))
        out[name] = arr.reshape(info["shape"]).copy()
    return out, meta

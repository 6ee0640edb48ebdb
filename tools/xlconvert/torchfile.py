"""Reading torch.save() files and pickles WITHOUT torch and without executing anything in them.

Checkpoints and vocab pickles are untrusted: a pickle can name any importable callable. Here
the unpickler never imports anything. Each global a file names is resolved to:
  - one of a few known data constructors, reimplemented here (OrderedDict, Counter, set,
    torch._utils._rebuild_tensor*/_rebuild_parameter*, torch.*Storage dtype markers,
    numpy scalar/array reconstruction), or
  - an inert stand-in (Opaque): a class whose instances only record the arguments and state
    they were given. A pickled nn.Module (e.g. the whole MemTransformerLM that the authors'
    train.py saves) thus becomes a tree of Opaque objects whose __dict__ holds _parameters,
    _modules and plain attributes, from which parameters are extracted by name.
Nothing an Opaque receives is ever called. Globals that are neither torch/nn/numpy/collections
nor a known model module are reported in Loaded.foreign_globals so callers can warn.

Formats: the zip format (torch >= 1.6: ARCHIVE/data.pkl + ARCHIVE/data/KEY storages), the legacy
format (magic number, protocol, sys_info, data pickle, storage keys, raw storages with an int64
element count each), and plain pickles (vocab.pkl). Tensors become numpy arrays (little-endian
storages; bf16 widened to float32).
"""
import collections
import io
import os
import pickle
import struct
import zipfile

import numpy as np

LEGACY_MAGIC = 0x1950a86a20f9469cfc6c

_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": "bf16", "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}
_TORCH_DTYPES = {"float32": np.float32, "float": np.float32, "float64": np.float64,
                 "double": np.float64, "float16": np.float16, "half": np.float16,
                 "bfloat16": "bf16", "int64": np.int64, "long": np.int64, "int32": np.int32,
                 "int": np.int32, "int16": np.int16, "int8": np.int8, "uint8": np.uint8,
                 "bool": np.bool_}
# Module prefixes whose globals are expected in model checkpoints (anything else is reported).
_EXPECTED_PREFIXES = ("torch", "collections", "numpy", "builtins", "__builtin__", "copyreg",
                      "copy_reg", "mem_transformer", "proj_adaptive_softmax",
                      "log_uniform_sampler", "transformers", "pytorch_transformers",
                      "pytorch_pretrained_bert", "utils", "data_utils", "vocabulary", "argparse",
                      "_codecs", "re", "sre_compile", "sacremoses")


class TorchFileError(ValueError):
    pass


class Opaque:
    """Inert stand-in for any class or function a pickle names. Calling it, constructing it,
    setting its state: all only record data."""
    __slots__ = ("__dict__",)
    _name = "?"

    def __init__(self, *args, **kwargs):
        self.__dict__["_args"] = args
        if kwargs:
            self.__dict__["_kwargs"] = kwargs

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2 and (state[0] is None or
                                                             isinstance(state[0], dict)):
            state, slots = state
            if isinstance(slots, dict):
                self.__dict__.update(slots)
        if isinstance(state, dict):
            self.__dict__.update(state)
        elif state is not None:
            self.__dict__["_state"] = state

    # Containers pickled via APPENDS/SETITEMS on an Opaque (e.g. a list subclass).
    def append(self, x):
        self.__dict__.setdefault("_items", []).append(x)

    def extend(self, xs):
        self.__dict__.setdefault("_items", []).extend(xs)

    def __setitem__(self, k, v):
        self.__dict__.setdefault("_map", {})[k] = v

    def __repr__(self):
        return f"<opaque {self._name}>"


def opaque_class(qualname):
    return type("Opaque_" + qualname.replace(".", "_"), (Opaque,), {"_name": qualname})


# Bytes of tensor storage read from files so far (all loads): lets a caller (and the tests)
# check that a lazy load of a big file, e.g. the authors' cache.pt, read none of its tensors.
STORAGE_BYTES_READ = [0]


class Storage:
    """A storage: dtype + element count; its bytes are attached when read. A lazy load leaves
    data None and a reader that fetches the bytes from the file on the first array()."""

    def __init__(self, dtype, key, numel):
        self.dtype, self.key, self.numel = dtype, key, numel
        self.data = None  # np.ndarray (1-D) once read
        self.reader = None  # () -> np.ndarray, for lazy loads

    def array(self):
        if self.data is None and self.reader is not None:
            self.data = self.reader()
            self.reader = None
        if self.data is None:
            raise TorchFileError(f"storage {self.key} was never read")
        return self.data


class TensorRef:
    """A lazily materialised tensor: (storage, offset, size, stride)."""

    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset = storage, int(offset)
        self.size, self.stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
        self.is_parameter = False

    @property
    def shape(self):
        return self.size

    def identity(self):
        return (self.storage.key, self.offset, self.size, self.stride)

    def numpy(self):
        base = self.storage.array()
        if not self.size:
            return base[self.offset:self.offset + 1].reshape(()).copy()
        extent = self.offset + 1 + sum((n - 1) * s for n, s in zip(self.size, self.stride) if n)
        if any(n == 0 for n in self.size):
            return np.zeros(self.size, dtype=base.dtype)
        if extent > base.size or self.offset < 0 or min(self.stride) < 0:
            raise TorchFileError(f"tensor of size {self.size} stride {self.stride} offset "
                                 f"{self.offset} overruns its storage of {base.size} elements")
        item = base.itemsize
        view = np.lib.stride_tricks.as_strided(
            base[self.offset:], shape=self.size, strides=[s * item for s in self.stride],
            writeable=False)
        return np.array(view)  # a contiguous copy

    def __repr__(self):
        return f"TensorRef{self.size}"


def _storage_dtype(obj, where):
    if isinstance(obj, _StorageType):
        return obj.dtype
    raise TorchFileError(f"{where}: storage of unsupported type {obj!r}")


class _StorageType:
    def __init__(self, name, dtype):
        self.name, self.dtype = name, dtype

    def __repr__(self):
        return f"torch.{self.name}"


class _DType:
    def __init__(self, name):
        self.name = name
        self.np = _TORCH_DTYPES.get(name)


def _rebuild_tensor(storage, storage_offset, size, stride, *rest):
    if not isinstance(storage, Storage):
        raise TorchFileError(f"tensor built from {type(storage).__name__}, not a storage")
    return TensorRef(storage, storage_offset, size, stride)


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, hooks, dtype,
                       *rest):
    if isinstance(dtype, _DType) and dtype.np is not None and storage.dtype == np.uint8:
        storage.dtype = dtype.np  # untyped storage: bytes reinterpreted as dtype
    return _rebuild_tensor(storage, storage_offset, size, stride)


def _rebuild_parameter(data, *rest):
    if isinstance(data, TensorRef):
        data.is_parameter = True
    return data


def _parameter_class(data=None, requires_grad=True, *rest):
    return _rebuild_parameter(data)


def _np_reconstruct(*args):
    return _NpArrayStub()


class _NpArrayStub(Opaque):
    """numpy arrays pickled inside a checkpoint: kept as data only (rebuilt from state)."""
    _name = "numpy.ndarray"

    def __setstate__(self, state):
        # state = (version, shape, dtype, is_fortran, rawdata)
        try:
            _, shape, dtype, fortran, raw = state
            if isinstance(dtype, np.dtype) and isinstance(raw, (bytes, bytearray)) and \
                    not dtype.hasobject:
                arr = np.frombuffer(bytes(raw), dtype=dtype)
                self.__dict__["value"] = arr.reshape(shape, order="F" if fortran else "C")
                return
        except (TypeError, ValueError):
            pass
        self.__dict__["_state"] = state


def _np_scalar(dtype, raw=None):
    if isinstance(dtype, np.dtype) and not dtype.hasobject and isinstance(raw, (bytes, bytearray)):
        return np.frombuffer(bytes(raw), dtype=dtype)[0]
    return None


def _np_dtype(name, *args):
    try:
        dt = np.dtype(name)
    except TypeError:
        return None
    return None if dt.hasobject else dt


def _reconstructor(cls, base, state=None):
    if isinstance(cls, type) and issubclass(cls, Opaque):
        obj = cls.__new__(cls)
        return obj
    if cls in (collections.OrderedDict, dict, list, set):
        return cls()
    raise TorchFileError(f"copyreg._reconstructor of {cls!r} refused")


def _newobj(cls, *args):
    if isinstance(cls, type) and (issubclass(cls, Opaque) or cls in _SAFE_CLASSES):
        return cls.__new__(cls)
    raise TorchFileError(f"__newobj__ of {cls!r} refused")


_SAFE_CLASSES = (collections.OrderedDict, collections.Counter, dict, list, set, frozenset,
                 tuple)

_KNOWN = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("collections", "Counter"): collections.Counter,
    ("collections", "defaultdict"): None,  # opaque: its default_factory must never be called
    ("builtins", "set"): set, ("__builtin__", "set"): set,
    ("builtins", "frozenset"): frozenset, ("__builtin__", "frozenset"): frozenset,
    ("builtins", "list"): list, ("builtins", "dict"): dict, ("builtins", "tuple"): tuple,
    ("builtins", "object"): object, ("__builtin__", "object"): object,
    ("builtins", "bytearray"): bytearray, ("builtins", "slice"): slice,
    ("builtins", "complex"): complex,
    ("copyreg", "_reconstructor"): _reconstructor, ("copy_reg", "_reconstructor"): _reconstructor,
    ("copyreg", "__newobj__"): _newobj,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch.nn.parameter", "Parameter"): _parameter_class,
    ("numpy.core.multiarray", "_reconstruct"): _np_reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _np_reconstruct,
    ("numpy.core.multiarray", "scalar"): _np_scalar,
    ("numpy._core.multiarray", "scalar"): _np_scalar,
    ("numpy", "dtype"): _np_dtype,
    ("_codecs", "encode"): lambda s, enc="latin-1", *a: s.encode(enc) if isinstance(s, str) else s,
}


class Loaded:
    """Result of a load: .obj (the unpickled object), .foreign_globals (names outside the
    expected modules), .globals (every global named)."""

    def __init__(self, obj, globals_seen):
        self.obj = obj
        self.globals = sorted(globals_seen)
        self.foreign_globals = [g for g in self.globals
                                if not g.split(".")[0] in _EXPECTED_PREFIXES]


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, f, where, storages, storage_factory=None):
        super().__init__(f, encoding="latin1")
        self.where = where
        self.storages = storages
        self.storage_factory = storage_factory
        self.globals_seen = set()
        self._opaque = {}

    def find_class(self, module, name):
        qual = f"{module}.{name}"
        self.globals_seen.add(qual)
        if (module, name) in _KNOWN and _KNOWN[(module, name)] is not None:
            return _KNOWN[(module, name)]
        if module in ("torch", "torch.storage", "torch.cuda") and name in _STORAGE_DTYPES:
            return _StorageType(name, _STORAGE_DTYPES[name])
        if module == "torch" and name in ("UntypedStorage", "ByteStorage"):
            return _StorageType(name, np.uint8)
        if module == "torch" and name in _TORCH_DTYPES:
            return _DType(name)
        if qual not in self._opaque:
            self._opaque[qual] = opaque_class(qual)
        return self._opaque[qual]

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or not pid:
            raise TorchFileError(f"{self.where}: unexpected persistent id {pid!r}")
        kind = pid[0].decode("ascii") if isinstance(pid[0], bytes) else pid[0]
        if kind == "module":  # legacy: ('module', class, source_file, source) -> the class
            return pid[1]
        if kind != "storage":
            raise TorchFileError(f"{self.where}: unknown persistent id kind {kind!r}")
        if self.storage_factory is None:
            raise TorchFileError(f"{self.where}: a plain pickle refers to tensor storage")
        return self.storage_factory(pid)


def _zip_load(path, src, lazy=False):
    try:
        zf = zipfile.ZipFile(src)
    except zipfile.BadZipFile as e:
        raise TorchFileError(f"{path}: corrupt zip archive ({e})") from None
    names = zf.namelist()
    pkl = [n for n in names if n.endswith("data.pkl") and n.count("/") == 1]
    if not pkl:
        raise TorchFileError(f"{path}: zip archive without ARCHIVE/data.pkl (not a torch.save file)")
    prefix = pkl[0][:-len("data.pkl")]
    if prefix + "byteorder" in names and zf.read(prefix + "byteorder").strip() != b"little":
        raise TorchFileError(f"{path}: big-endian checkpoints are not supported")
    storages = {}

    def factory(pid):
        _, stype, key, _location, numel = pid[:5]
        key = key.decode() if isinstance(key, bytes) else str(key)
        if key not in storages:
            dt = _storage_dtype(stype, path)
            st = Storage(dt, key, int(numel))
            rec = prefix + "data/" + key
            if rec not in names:
                raise TorchFileError(f"{path}: storage record {rec} missing")

            def read(rec=rec, st=st, key=key):
                raw = zf.read(rec)
                STORAGE_BYTES_READ[0] += len(raw)
                return _decode_storage(raw, st.dtype, path, key)
            if lazy:
                st.reader = read
            else:
                st.data = read()
                st.numel = st.data.size
            storages[key] = st
        return storages[key]

    up = _RestrictedUnpickler(io.BytesIO(zf.read(pkl[0])), path, storages, factory)
    try:
        obj = up.load()
    except TorchFileError:
        raise
    except Exception as e:  # malformed pickle data of any kind
        raise TorchFileError(f"{path}: cannot unpickle data.pkl ({type(e).__name__}: {e})") from None
    return Loaded(obj, up.globals_seen)


def _decode_storage(raw, dt, path, key):
    if dt == "bf16":
        u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return u.view(np.float32)
    dt = np.dtype(dt).newbyteorder("<")
    if len(raw) % dt.itemsize:
        raise TorchFileError(f"{path}: storage {key} has {len(raw)} bytes, not a multiple of "
                             f"{dt.itemsize}")
    return np.frombuffer(raw, dtype=dt)


def _legacy_load(path, f, size, lazy=False):

    def small_pickle(what):
        try:
            return _RestrictedUnpickler(f, path, {}).load()
        except Exception as e:
            raise TorchFileError(f"{path}: not a torch.save file ({what} unreadable: "
                                 f"{type(e).__name__})") from None

    magic = small_pickle("magic number")
    if magic != LEGACY_MAGIC:
        raise TorchFileError(f"{path}: not a torch.save file (bad magic number)")
    proto = small_pickle("protocol version")
    if proto != 1001:
        raise TorchFileError(f"{path}: unsupported legacy protocol {proto!r}")
    sys_info = small_pickle("sys_info")
    if isinstance(sys_info, dict) and sys_info.get("little_endian") is False:
        raise TorchFileError(f"{path}: big-endian checkpoints are not supported")
    storages = {}

    def factory(pid):
        _, stype, key, _location, numel, view = (list(pid) + [None])[:6]
        key = key.decode() if isinstance(key, bytes) else str(key)
        if key not in storages:
            storages[key] = Storage(_storage_dtype(stype, path), key, int(numel))
        st = storages[key]
        if view is not None:
            raise TorchFileError(f"{path}: storage views (pre-0.4 checkpoints) are not supported")
        return st

    up = _RestrictedUnpickler(f, path, storages, factory)
    try:
        obj = up.load()
    except TorchFileError:
        raise
    except Exception as e:
        raise TorchFileError(f"{path}: cannot unpickle ({type(e).__name__}: {e})") from None
    keys = small_pickle("storage keys")
    if not isinstance(keys, list):
        raise TorchFileError(f"{path}: storage key list missing")
    pos = f.tell()
    # Only the 8-byte element counts are read here; each storage's bytes are read at once,
    # or (lazy) when its tensor is first materialised.
    for key in keys:
        key = key.decode() if isinstance(key, bytes) else str(key)
        if key not in storages:
            raise TorchFileError(f"{path}: storage {key} listed but never referenced")
        st = storages[key]
        if pos + 8 > size:
            raise TorchFileError(f"{path}: truncated before storage {key}")
        f.seek(pos)
        (n,) = struct.unpack("<q", f.read(8))
        pos += 8
        itemsize = 2 if st.dtype == "bf16" else np.dtype(st.dtype).itemsize
        if n != st.numel or n < 0 or pos + n * itemsize > size:
            raise TorchFileError(f"{path}: storage {key}: {n} elements recorded, {st.numel} "
                                 "expected, or the file is truncated")

        def read(st=st, at=pos, nbytes=n * itemsize, key=key):
            f.seek(at)
            raw = f.read(nbytes)
            STORAGE_BYTES_READ[0] += len(raw)
            return _decode_storage(raw, st.dtype, path, key)
        if lazy:
            st.reader = read
        else:
            st.data = read()
        pos += n * itemsize
    return Loaded(obj, up.globals_seen)


def load(path, lazy=False):
    """Loads a torch.save() file (zip or legacy) or a plain pickle, safely. Returns Loaded.
    lazy=True reads the pickle only: tensor storages stay in the file until a TensorRef's
    numpy() needs them (the file is kept open by the returned objects), so a file holding a
    big encoded corpus next to a small vocabulary costs only the vocabulary."""
    try:
        if lazy:
            fh = open(path, "rb")
            size = os.fstat(fh.fileno()).st_size
        else:
            with open(path, "rb") as f0:
                fh = io.BytesIO(f0.read())
            size = len(fh.getbuffer())
    except OSError as e:
        raise TorchFileError(f"{path}: {e.strerror}") from None
    head = fh.read(4)
    fh.seek(0)
    if head == b"PK\x03\x04":
        return _zip_load(path, fh, lazy)
    if head[:1] == b"\x80":
        # Legacy torch files start with a pickled magic number; plain pickles do not.
        try:
            first = _RestrictedUnpickler(fh, path, {}).load()
        except Exception:
            first = None
        fh.seek(0)
        if first == LEGACY_MAGIC:
            return _legacy_load(path, fh, size, lazy)
    up = _RestrictedUnpickler(fh, path, {})
    try:
        obj = up.load()
    except TorchFileError:
        raise
    except Exception as e:
        raise TorchFileError(f"{path}: not a torch.save file or pickle ({type(e).__name__}: {e})") \
            from None
    return Loaded(obj, up.globals_seen)


def module_state(obj, prefix="", out=None, seen=None):
    """Walks a pickled nn.Module tree (Opaque objects with _parameters/_buffers/_modules) and
    returns {dotted name: TensorRef}, parameters and buffers, in definition order; a shared
    tensor appears under every name that refers to it (like state_dict)."""
    out = collections.OrderedDict() if out is None else out
    d = getattr(obj, "__dict__", None) or {}
    for group in ("_parameters", "_buffers"):
        for k, v in (d.get(group) or {}).items():
            if isinstance(v, TensorRef):
                out[prefix + k] = v
    for k, child in (d.get("_modules") or {}).items():
        if child is not None:
            module_state(child, prefix + k + ".", out)
    return out


def is_module(obj):
    return isinstance(obj, Opaque) and "_modules" in obj.__dict__ and "_parameters" in obj.__dict__


def find_state_dict(obj, path):
    """From whatever a checkpoint holds, the {name: TensorRef} of its model:
    a state_dict, a whole pickled module, or a dict wrapping either under a usual key."""
    if is_module(obj):
        return module_state(obj), obj
    if isinstance(obj, dict):
        tensors = {k: v for k, v in obj.items() if isinstance(v, TensorRef)}
        if tensors and len(tensors) >= len(obj) // 2:
            return collections.OrderedDict(tensors), None
        for key in ("model", "state_dict", "model_state_dict", "module", "net"):
            if key in obj:
                return find_state_dict(obj[key], path)
    raise TorchFileError(f"{path}: holds no state_dict or pickled model "
                         f"(top-level object: {type(obj).__name__})")


def opaque_attr(obj, name, default=None):
    d = getattr(obj, "__dict__", None) or {}
    return d.get(name, default)

"""The authors' TensorFlow checkpoints (kimiyoung/transformer-xl tf/model.py, as released by
tf/sota/download.sh) -> an xlserve model directory, tensor by tensor (the largest, lm1b, is
3.3 GB of float32: no tensor is held twice and the whole model is never in memory).

Variable names (tf/model.py, scope "transformer"), TF shape -> HF name (shape):
  r_w_bias, r_r_bias          [H, Dh] (untie_r false) -> transformer.r_w_bias / r_r_bias;
                              [L, H, Dh] (untie_r) -> transformer.layers.N.dec_attn.r_*_bias
  adaptive_embed/lookup_table [V, E]     -> transformer.word_emb.emb_layers.0.weight (div_val 1)
  adaptive_embed/proj_W       [E, D]     -> transformer.word_emb.emb_projs.0 [D, E] (transposed)
  adaptive_embed/cutoff_i/lookup_table, /proj_W (div_val > 1) -> emb_layers.i.weight,
                              emb_projs.i (transposed); no proj_W (proj_same_dim false and
                              E_i == D) -> the identity
  layer_N/rel_attn/qkv/kernel [D, 3HDh]  -> transformer.layers.N.dec_attn.qkv_net.weight [3HDh, D]
  layer_N/rel_attn/r/kernel, o/kernel    -> dec_attn.r_net.weight, o_net.weight (transposed)
  layer_N/rel_attn/LayerNorm/gamma|beta  -> dec_attn.layer_norm.weight|bias
  layer_N/ff/layer_1|layer_2/kernel|bias -> pos_ff.CoreNet.0|3.weight (transposed)|bias
  layer_N/ff/LayerNorm/gamma|beta        -> pos_ff.layer_norm.weight|bias
  adaptive_softmax/bias       [V]        -> crit.out_layers.0.bias (no cutoffs)
  adaptive_softmax/cutoff_i/b            -> crit.out_layers.i.bias (div_val > 1), or the slice
                                            [cutoff_i, cutoff_i+1) of crit.out_layers.0.bias
  adaptive_softmax/cutoff_i/proj [E_i, D] -> crit.out_projs.i [D, E_i] (transposed); absent when
                              tied to the embedding's projection (proj_share_all_but_first)
  adaptive_softmax/cutoff_0/cluster_W, cluster_b -> crit.cluster_weight, crit.cluster_bias
The softmax weights are always the embedding tables in tf/model.py (tie_word_embeddings).
Tail cluster i reads head column cutoffs[0] + i - 1 (also in the TPU head_target of
data_utils.py): the Hugging Face order, so cluster rows are NOT reversed (the authors' PyTorch
code reads them in reverse; see sources.py).

Semantics carried over: tf.contrib.layers.layer_norm's epsilon 1e-12 (layer_norm_epsilon);
post-LayerNorm; with same_length the TF mask (_create_mask) lets each query see mem_len + 1
positions (itself and mem_len before it) where the PyTorch code and xlserve see mem_len, so
config.json gets mem_len + 1 for a same_length evaluation with the scripts' mem_len.
"""
import json
import os
import re
import struct
import sys

import numpy as np

from xlconvert import layout, tf_presets, vocab_kinds
from xlconvert.tf_bundle import Bundle, BundleError
from xlmodel import model_dir, safetensors_io

P = "transformer/"
LAYER_RE = re.compile(r"^transformer/layer_(\d+)/")
# Variables a training checkpoint may hold that are not part of the model.
SKIP_RE = re.compile(r"(^|/)(global_step|beta1_power|beta2_power)$|/(Adam|Adam_1|Momentum|"
                     r"RMSProp|RMSProp_1)$")
LAYER_VARS = ("rel_attn/qkv/kernel", "rel_attn/r/kernel", "rel_attn/o/kernel",
              "rel_attn/LayerNorm/gamma", "rel_attn/LayerNorm/beta", "ff/layer_1/kernel",
              "ff/layer_1/bias", "ff/layer_2/kernel", "ff/layer_2/bias", "ff/LayerNorm/gamma",
              "ff/LayerNorm/beta")
TF_LAYER_NORM_EPS = 1e-12
# Matrices the daemon narrows with --weights bf16|int8 (stored BF16 with --weights bf16 here).
NARROW_RE = re.compile(r"(qkv_net|r_net|o_net)\.weight$|CoreNet\.[03]\.weight$|"
                       r"emb_layers\.\d+\.weight$|emb_projs\.\d+$|out_projs\.\d+$")


class ConvertError(Exception):
    pass


# ------------------------------------------------------------------------------------------
# Locating the checkpoint in the released archive layout

def _checkpoint_file_prefix(model_dir_path):
    """The prefix named by a TF `checkpoint` state file (model_checkpoint_path: "...")."""
    path = os.path.join(model_dir_path, "checkpoint")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as f:
        m = re.search(r'^model_checkpoint_path:\s*"([^"]+)"', f.read(), re.M)
    if not m:
        return None
    p = m.group(1)
    # the released files name the training machine's path; the file name is what counts
    return os.path.join(model_dir_path, os.path.basename(p))


def is_tf_archive(path):
    """Whether PATH is a directory in the released layout (model/ holding a checkpoint)."""
    mdir = os.path.join(path, "model")
    return os.path.isdir(mdir) and any(f.endswith(".index") for f in os.listdir(mdir))


def locate(source):
    """(checkpoint prefix, data directory or None) from a prefix, an .index file, a model/
    directory or the archive directory (tf_enwik8/ with model/ and data/)."""
    src = source.rstrip("/") or source
    if src.endswith(".index"):
        src = src[:-len(".index")]
    if os.path.isdir(src):
        root = src
        mdir = os.path.join(src, "model") if os.path.isdir(os.path.join(src, "model")) else src
        prefix = _checkpoint_file_prefix(mdir)
        if prefix is None or not os.path.exists(prefix + ".index"):
            idx = sorted(f for f in os.listdir(mdir) if f.endswith(".index"))
            if len(idx) != 1:
                raise ConvertError(f"{mdir}: expected one checkpoint (*.index) or a `checkpoint` "
                                   f"file naming it; found {len(idx)} .index files")
            prefix = os.path.join(mdir, idx[0][:-len(".index")])
        if mdir == src:
            root = os.path.dirname(os.path.abspath(src))
    else:
        prefix = src
        if not os.path.exists(prefix + ".index"):
            raise ConvertError(f"{prefix}.index: not found (give the checkpoint prefix, e.g. "
                               ".../model/model.ckpt-0, its .index file, or the archive "
                               "directory)")
        root = os.path.dirname(os.path.dirname(os.path.abspath(prefix)))
    data = os.path.join(root, "data")
    return prefix, (data if os.path.isdir(data) else None)


# ------------------------------------------------------------------------------------------
# Architecture from the tensor shapes

def infer_arch(bundle):
    """The model's hyperparameters from the entries' names and shapes (no data read)."""
    ents = bundle.entries
    where = bundle.index_file

    def shape(name):
        if name not in ents:
            raise ConvertError(f"{where}: missing tensor {name}")
        return tuple(ents[name].shape)

    layers = sorted({int(m.group(1)) for n in ents for m in [LAYER_RE.match(n)] if m})
    if not layers:
        raise ConvertError(f"{where}: no transformer/layer_N/ variables: not a checkpoint of "
                           f"the authors' tf/model.py (names: {', '.join(list(ents)[:6])} ...)")
    if layers != list(range(len(layers))):
        raise ConvertError(f"{where}: layer numbers {layers} are not 0..{len(layers) - 1}")
    n_layer = len(layers)
    d_model, three_hd = shape(P + "layer_0/rel_attn/qkv/kernel")
    rw = shape(P + "r_w_bias")
    if len(rw) == 3 and rw[0] == n_layer:
        untie_r, (n_head, d_head) = True, rw[1:]
    elif len(rw) == 2:
        untie_r, (n_head, d_head) = False, rw
    else:
        raise ConvertError(f"{where}: tensor {P}r_w_bias has shape {list(rw)}; expected "
                           f"[n_head, d_head] or [{n_layer}, n_head, d_head]")
    if three_hd != 3 * n_head * d_head:
        raise ConvertError(f"{where}: tensor {P}layer_0/rel_attn/qkv/kernel has shape "
                           f"{[d_model, three_hd]}; r_w_bias implies {3 * n_head * d_head} "
                           "columns")
    d_inner = shape(P + "layer_0/ff/layer_1/kernel")[1]

    emb = P + "adaptive_embed/"
    sm = P + "adaptive_softmax/"
    if emb + "lookup_table" in ents:
        div_val = 1
        vocab, d_embed = shape(emb + "lookup_table")
        emb_proj = [emb + "proj_W" in ents]
        tables = [vocab]
    else:
        tables, dims, emb_proj = [], [], []
        i = 0
        while emb + f"cutoff_{i}/lookup_table" in ents:
            r, d = shape(emb + f"cutoff_{i}/lookup_table")
            tables.append(r)
            dims.append(d)
            emb_proj.append(emb + f"cutoff_{i}/proj_W" in ents)
            i += 1
        if not tables:
            raise ConvertError(f"{where}: missing tensor {emb}lookup_table (or "
                               f"{emb}cutoff_0/lookup_table)")
        d_embed = dims[0]
        div_val = dims[0] // dims[1] if len(dims) > 1 and dims[1] else 1
        if len(dims) < 2 or div_val < 2 or any(d != d_embed // div_val ** k
                                               for k, d in enumerate(dims)):
            raise ConvertError(f"{where}: adaptive embedding widths {dims} are not d_embed / "
                               "div_val^i")
        vocab = sum(tables)
    if sm + "bias" in ents:
        cutoffs = []
    else:
        sizes = []
        i = 0
        while sm + f"cutoff_{i}/b" in ents:
            sizes.append(shape(sm + f"cutoff_{i}/b")[0])
            i += 1
        if len(sizes) < 2:
            raise ConvertError(f"{where}: missing tensor {sm}bias (or {sm}cutoff_N/b for an "
                               "adaptive softmax)")
        cutoffs = [int(c) for c in np.cumsum(sizes)[:-1]]
        if sum(sizes) != vocab:
            raise ConvertError(f"{where}: the softmax clusters cover {sum(sizes)} symbols, the "
                               f"embedding {vocab}")
        if div_val > 1 and sizes != tables:
            raise ConvertError(f"{where}: softmax cluster sizes {sizes} differ from the "
                               f"embedding's {tables}")
    n_out = len(cutoffs) + 1
    if div_val > 1 and len(tables) != n_out:
        raise ConvertError(f"{where}: {len(tables)} embedding clusters, {n_out} softmax "
                           "clusters")
    tie_projs, out_proj = [], []
    for i in range(n_out):
        has = sm + f"cutoff_{i}/proj" in ents
        out_proj.append(has)
        src_has = emb_proj[0] if div_val == 1 else emb_proj[i]
        tie_projs.append(not has and src_has)
    if not cutoffs:  # tf/model.py: the plain softmax always uses the embedding projection
        tie_projs = [emb_proj[0]]
        out_proj = [False]
    return {
        "n_layer": n_layer, "d_model": int(d_model), "d_embed": int(d_embed),
        "n_head": int(n_head), "d_head": int(d_head), "d_inner": int(d_inner),
        "div_val": int(div_val), "cutoffs": cutoffs, "vocab_size": int(vocab),
        "untie_r": untie_r, "tie_projs": tie_projs,
        "proj_share_all_but_first": all(tie_projs[1:]) if n_out > 1 else False,
        "proj_same_dim": all(emb_proj) if div_val > 1 else True,
        "_emb_proj": emb_proj, "_out_proj": out_proj,
    }


# ------------------------------------------------------------------------------------------
# The tensor plan: every output tensor with its shape and how to make it

class Out:
    def __init__(self, name, shape, make):
        self.name, self.shape, self.make = name, tuple(int(s) for s in shape), make


def plan(bundle, arch):
    ents = bundle.entries
    a = arch
    D, E, L = a["d_model"], a["d_embed"], a["n_layer"]
    used = set()

    def src(name):
        if name not in ents:
            raise ConvertError(f"{bundle.index_file}: missing tensor {name}")
        used.add(name)
        return tuple(ents[name].shape)

    def read(name):
        return bundle.read(name)

    def copy(name):
        return lambda: read(name)

    def transposed(name):
        return lambda: np.ascontiguousarray(read(name).T)

    def eye(n):
        return lambda: np.eye(n, dtype=np.float32)

    outs = []

    def add(hf, shape, make, tf_name=None, tf_shape=None):
        if tf_name is not None:
            got = src(tf_name)
            if tuple(got) != tuple(tf_shape):
                raise ConvertError(f"{bundle.index_file}: tensor {tf_name} has shape "
                                   f"{list(got)}; the model's other tensors imply "
                                   f"{list(tf_shape)}")
        outs.append(Out(hf, shape, make))

    H, Dh, Di = a["n_head"], a["d_head"], a["d_inner"]
    for b in ("r_w_bias", "r_r_bias"):
        name = P + b
        if a["untie_r"]:
            src(name)
            for n in range(L):
                add(f"transformer.layers.{n}.dec_attn.{b}", (H, Dh),
                    (lambda nm, k: lambda: np.ascontiguousarray(read(nm)[k]))(name, n))
            if tuple(ents[name].shape) != (L, H, Dh):
                raise ConvertError(f"{bundle.index_file}: tensor {name} has shape "
                                   f"{list(ents[name].shape)}, expected {[L, H, Dh]}")
        else:
            add(f"transformer.{b}", (H, Dh), copy(name), name, (H, Dh))

    emb, sm = P + "adaptive_embed/", P + "adaptive_softmax/"
    bounds = layout.cluster_bounds(a["vocab_size"], a["cutoffs"])
    if a["div_val"] == 1:
        V = a["vocab_size"]
        add("transformer.word_emb.emb_layers.0.weight", (V, E), copy(emb + "lookup_table"),
            emb + "lookup_table", (V, E))
        if D != E:
            add("transformer.word_emb.emb_projs.0", (D, E), transposed(emb + "proj_W"),
                emb + "proj_W", (E, D))
    else:
        for i, (lo, hi) in enumerate(bounds):
            Ei = E // a["div_val"] ** i
            t = emb + f"cutoff_{i}/"
            add(f"transformer.word_emb.emb_layers.{i}.weight", (hi - lo, Ei),
                copy(t + "lookup_table"), t + "lookup_table", (hi - lo, Ei))
            if a["_emb_proj"][i]:
                add(f"transformer.word_emb.emb_projs.{i}", (D, Ei), transposed(t + "proj_W"),
                    t + "proj_W", (Ei, D))
            elif Ei == D:
                add(f"transformer.word_emb.emb_projs.{i}", (D, D), eye(D))
            else:
                raise ConvertError(f"{bundle.index_file}: missing tensor {t}proj_W "
                                   f"(embedding width {Ei} differs from d_model {D})")

    for n in range(L):
        t, h = f"{P}layer_{n}/", f"transformer.layers.{n}."
        add(h + "dec_attn.qkv_net.weight", (3 * H * Dh, D), transposed(t + "rel_attn/qkv/kernel"),
            t + "rel_attn/qkv/kernel", (D, 3 * H * Dh))
        add(h + "dec_attn.r_net.weight", (H * Dh, D), transposed(t + "rel_attn/r/kernel"),
            t + "rel_attn/r/kernel", (D, H * Dh))
        add(h + "dec_attn.o_net.weight", (D, H * Dh), transposed(t + "rel_attn/o/kernel"),
            t + "rel_attn/o/kernel", (H * Dh, D))
        for part in ("rel_attn", "ff"):
            hn = "dec_attn" if part == "rel_attn" else "pos_ff"
            add(h + f"{hn}.layer_norm.weight", (D,), copy(t + f"{part}/LayerNorm/gamma"),
                t + f"{part}/LayerNorm/gamma", (D,))
            add(h + f"{hn}.layer_norm.bias", (D,), copy(t + f"{part}/LayerNorm/beta"),
                t + f"{part}/LayerNorm/beta", (D,))
        add(h + "pos_ff.CoreNet.0.weight", (Di, D), transposed(t + "ff/layer_1/kernel"),
            t + "ff/layer_1/kernel", (D, Di))
        add(h + "pos_ff.CoreNet.0.bias", (Di,), copy(t + "ff/layer_1/bias"),
            t + "ff/layer_1/bias", (Di,))
        add(h + "pos_ff.CoreNet.3.weight", (D, Di), transposed(t + "ff/layer_2/kernel"),
            t + "ff/layer_2/kernel", (Di, D))
        add(h + "pos_ff.CoreNet.3.bias", (D,), copy(t + "ff/layer_2/bias"),
            t + "ff/layer_2/bias", (D,))

    if not a["cutoffs"]:
        V = a["vocab_size"]
        add("crit.out_layers.0.bias", (V,), copy(sm + "bias"), sm + "bias", (V,))
    else:
        nc = len(a["cutoffs"])
        add("crit.cluster_weight", (nc, E), copy(sm + "cutoff_0/cluster_W"),
            sm + "cutoff_0/cluster_W", (nc, E))
        add("crit.cluster_bias", (nc,), copy(sm + "cutoff_0/cluster_b"),
            sm + "cutoff_0/cluster_b", (nc,))
        bnames = [sm + f"cutoff_{i}/b" for i in range(len(bounds))]
        for i, (lo, hi) in enumerate(bounds):
            src(bnames[i])
        if a["div_val"] == 1:
            add("crit.out_layers.0.bias", (a["vocab_size"],),
                lambda: np.concatenate([read(b) for b in bnames]))
        else:
            for i, (lo, hi) in enumerate(bounds):
                add(f"crit.out_layers.{i}.bias", (hi - lo,), copy(bnames[i]))
        for i, (lo, hi) in enumerate(bounds):
            Ei = E if a["div_val"] == 1 else E // a["div_val"] ** i
            if a["tie_projs"][i] or (a["div_val"] == 1 and D == E):
                continue  # tied to the embedding's projection, or no projection at all
            t = sm + f"cutoff_{i}/proj"
            if a["_out_proj"][i]:
                add(f"crit.out_projs.{i}", (D, Ei), transposed(t), t, (Ei, D))
            elif Ei == D:
                add(f"crit.out_projs.{i}", (D, D), eye(D))
            else:
                raise ConvertError(f"{bundle.index_file}: missing tensor {t}")

    # keys of the parts of a partitioned variable (TF's slice keys start with a zero byte):
    # left to the full entry, which Bundle.check refuses naming the variable
    extra = [n for n in ents if n not in used and not n.startswith("\0")]
    skipped = [n for n in extra if SKIP_RE.search(n)]
    unknown = [n for n in extra if n not in skipped]
    if unknown:
        raise ConvertError(f"{bundle.index_file}: cannot map tensors: {', '.join(unknown[:10])}"
                           + (f" (and {len(unknown) - 10} more)" if len(unknown) > 10 else ""))
    return outs, skipped


def check_plan(cfg, outs, where):
    """The planned names and shapes against the HF layout (tied copies left out)."""
    want = layout.expected_shapes(cfg)
    tied = layout.tied_sources(cfg)
    have = {o.name: o.shape for o in outs}
    problems = []
    for name, shape in want.items():
        if name in tied:
            continue
        if name not in have:
            problems.append(f"missing tensor {name} {shape}")
        elif have[name] != tuple(shape):
            problems.append(f"tensor {name}: shape {have[name]}, config implies {shape}")
    for name in have:
        if name not in want:
            problems.append(f"unexpected tensor {name}")
    if problems:
        raise ConvertError(f"{where}: " + "; ".join(problems))


# ------------------------------------------------------------------------------------------
# Vocabulary and corpus info

def read_corpus_info(path):
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError) as e:
        raise ConvertError(f"{path}: unreadable corpus info ({e})") from None
    if not isinstance(info, dict) or not isinstance(info.get("vocab_size"), int):
        raise ConvertError(f"{path}: no integer vocab_size")
    cut = info.get("cutoffs", [])
    if not isinstance(cut, list) or not all(isinstance(c, int) for c in cut):
        raise ConvertError(f"{path}: cutoffs must be a list of integers")
    return info


def repair_py2_strings(syms):
    """Symbols as a Python 2 pickle's byte strings come out of a latin-1 unpickler: UTF-8 bytes
    read one character per byte ("cafÃ©"). When every symbol is such a string (all characters
    below 256, re-encoding gives valid UTF-8) and some are not ASCII, returns the decoded
    symbols; else None (a Python 3 pickle has real characters)."""
    out = []
    changed = False
    for s in syms:
        if s.isascii():
            out.append(s)
            continue
        try:
            d = s.encode("latin-1").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            return None
        out.append(d)
        changed = True
    return out if changed else None


def read_vocab(path, vocab_size):
    """(idx2sym, meta) from the archive's cache.pkl (a pickled data_utils.Corpus, read without
    executing it), a vocab file of the authors' form (first field of each line, duplicates
    skipped: lm1b's 1b_word_vocab.txt "symbol count"), or a vocab.txt, one symbol per line."""
    if not path.endswith(".txt"):
        try:  # the converters' shared reader (pickles read lazily, never executed)
            v = vocab_kinds.read_vocab(path, vocab_size)
        except vocab_kinds.VocabError as e:
            raise ConvertError(str(e)) from None
        syms, meta = v.symbols, v.meta
        fixed = repair_py2_strings(syms)
        if fixed is not None:
            print(f"{path}: note: the symbols are Python 2 byte strings; read as UTF-8",
                  file=sys.stderr)
            syms = fixed
        return syms, meta
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f]
    except (OSError, UnicodeDecodeError) as e:
        raise ConvertError(f"{path}: cannot read ({e})") from None
    while lines and lines[-1] == "":
        lines.pop()
    fields = [ln.split() for ln in lines]
    if fields and all(len(x) == 2 and x[1].isdigit() for x in fields):
        syms = list(dict.fromkeys(x[0] for x in fields))  # Vocab._build_from_file
    else:
        syms = lines
    if len(syms) != vocab_size:
        raise ConvertError(f"{path}: {len(syms)} symbols, the model has {vocab_size}")
    bad = [s for s in syms if s == "" or any(c.isspace() for c in s)]
    if bad:
        raise ConvertError(f"{path}: {len(bad)} symbols are empty or contain white space "
                           f"(first: {bad[0]!r})")
    if len(set(syms)) != len(syms):
        raise ConvertError(f"{path}: a symbol appears twice")
    return syms, {}


# ------------------------------------------------------------------------------------------
# Streaming safetensors writer

def write_safetensors_streaming(path, outs, bf16_names, metadata, progress=None):
    """Header first (all shapes known from the plan), then each tensor made, checked against its
    planned shape, written and dropped: peak memory is about one tensor (plus its transpose)."""
    header = {}
    offset = 0
    for o in outs:
        n = 1
        for s in o.shape:
            n *= s
        nbytes = n * (2 if o.name in bf16_names else 4)
        header[o.name] = {"dtype": "BF16" if o.name in bf16_names else "F32",
                          "shape": list(o.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    tmp = path + ".partial"
    try:
        _write_body(tmp, hjson, outs, bf16_names, progress)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    os.replace(tmp, path)


def _write_body(tmp, hjson, outs, bf16_names, progress):
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for o in outs:
            arr = np.asarray(o.make(), dtype=np.float32)
            if tuple(arr.shape) != o.shape:
                raise ConvertError(f"internal: {o.name} made with shape {arr.shape}, planned "
                                   f"{o.shape}")
            if o.name in bf16_names:
                f.write(safetensors_io.f32_to_bf16_bytes(arr))
            else:
                f.write(np.ascontiguousarray(arr, dtype="<f4").data)
            if progress:
                progress(o.name)
            del arr


# ------------------------------------------------------------------------------------------
# Conversion

def convert_tf(source, out_dir, preset=None, vocab_path=None, corpus_info_path=None,
               overrides=None, weights="f32", log=None, tokenizer=None, tokenizer_options=None):
    """SOURCE: the archive directory, its model/ directory, a checkpoint prefix or .index file.
    tokenizer / tokenizer_options: the user's choice over the automatic one (checked by
    xlconvert.vocab_kinds where it exists)."""
    ov = dict(overrides or {})
    log = log or (lambda msg: print(msg, file=sys.stderr))
    prefix, data_dir = locate(source)
    try:
        bundle = Bundle(prefix)
        arch = infer_arch(bundle)
    except BundleError as e:
        raise ConvertError(str(e)) from None
    where = bundle.index_file

    pre = None
    if preset is not None:
        if preset not in tf_presets.PRESETS:
            raise ConvertError(f"unknown preset {preset!r} (one of "
                               f"{', '.join(tf_presets.PRESETS)})")
        pre = tf_presets.PRESETS[preset]
        diff = [f"{k} {arch[k]} (preset {preset}: {pre[k]})" for k in tf_presets.ARCH_KEYS
                if k in arch and arch[k] != pre[k]]
        if diff:
            raise ConvertError(f"{where}: the checkpoint does not match preset {preset}: "
                               + "; ".join(diff))

    if corpus_info_path is None and data_dir is not None:
        p = os.path.join(data_dir, "corpus-info.json")
        corpus_info_path = p if os.path.exists(p) else None
    info = read_corpus_info(corpus_info_path) if corpus_info_path else {}
    if info:
        if info["vocab_size"] != arch["vocab_size"]:
            raise ConvertError(f"{corpus_info_path}: vocab_size {info['vocab_size']}, the "
                               f"checkpoint has {arch['vocab_size']} symbols")
        cut = list(info.get("cutoffs") or [])
        if cut and cut[1:-1] != arch["cutoffs"]:
            raise ConvertError(f"{corpus_info_path}: cutoffs {cut[1:-1]}, the checkpoint's "
                               f"softmax clusters give {arch['cutoffs']}")
    dataset = preset or info.get("dataset")

    ev = {k: (pre[k] if pre else None) for k in tf_presets.EVAL_KEYS}
    for k in tf_presets.EVAL_KEYS:
        if ov.get(k) is not None:
            ev[k] = ov[k]
    if ev["mem_len"] is None or ev["mem_len"] <= 0:
        raise ConvertError(f"{where}: give --mem-len (the evaluation script's mem_len) or "
                           "--preset")
    ev["tgt_len"] = ev["tgt_len"] or 128
    ev["clamp_len"] = -1 if ev["clamp_len"] is None else ev["clamp_len"]
    ev["same_length"] = bool(ev["same_length"])

    if vocab_path is None and data_dir is not None:
        p = os.path.join(data_dir, "cache.pkl")
        vocab_path = p if os.path.exists(p) else None
    if vocab_path is None:
        raise ConvertError(f"{where}: no vocabulary: give --vocab (the archive's "
                           "data/cache.pkl, or a vocab file)")
    vocab, vmeta = read_vocab(vocab_path, arch["vocab_size"])
    dataset = dataset or vmeta.get("dataset")
    kind, opts = tf_presets.tokenizer_for(dataset, vocab, vmeta)
    if tokenizer is not None or tokenizer_options:
        meta = dict(vmeta, format="authors", dataset=dataset)
        if dataset is not None:
            meta.setdefault("lower_case", tf_presets.LOWER_CASE.get(dataset, False))
        try:
            kind, opts = vocab_kinds.choose(vocab, meta, tokenizer, tokenizer_options,
                                            vocab_path)
        except vocab_kinds.VocabError as e:
            raise ConvertError(str(e)) from None

    cfg = {k: v for k, v in arch.items() if not k.startswith("_") and k != "proj_same_dim"}
    cfg.update({
        "pre_lnorm": False, "attn_type": 0, "tie_word_embeddings": True,
        "layer_norm_epsilon": TF_LAYER_NORM_EPS, "adaptive": bool(arch["cutoffs"]),
        "dropout": 0.0, "dropatt": 0.0, "tgt_len": int(ev["tgt_len"]),
        "mem_len": int(ev["mem_len"]) + (1 if ev["same_length"] else 0),
        "clamp_len": int(ev["clamp_len"]), "same_length": ev["same_length"],
        "xlserve_tokenizer": kind,
    })
    if opts:
        cfg["xlserve_tokenizer_options"] = opts
    try:
        outs, skipped = plan(bundle, arch)
        check_plan(cfg, outs, where)
        for name in bundle.entries:
            if name not in skipped and not name.startswith("\0"):
                bundle.check(name)
    except BundleError as e:
        raise ConvertError(str(e)) from None
    if ev["same_length"]:
        log(f"{where}: note: mem_len {cfg['mem_len']} in config.json: TF's same_length mask "
            f"with mem_len {ev['mem_len']} lets each query see {cfg['mem_len']} positions")
    if skipped:
        log(f"{where}: note: {len(skipped)} training-only variables skipped "
            f"({', '.join(skipped[:4])}{' ...' if len(skipped) > 4 else ''})")

    os.makedirs(out_dir, exist_ok=True)
    full = dict(model_dir.CONFIG_DEFAULTS)
    full.update(cfg)
    bf16 = {o.name for o in outs if NARROW_RE.search(o.name)} if weights == "bf16" else set()
    meta = {"producer": "tools/convert.py", "source": "tensorflow",
            "source_file": os.path.basename(prefix), "tf_mem_len": ev["mem_len"],
            "format": "pt"}
    try:
        write_safetensors_streaming(os.path.join(out_dir, "model.safetensors"), outs, bf16, meta)
    except BundleError as e:
        raise ConvertError(str(e)) from None
    with open(os.path.join(out_dir, "vocab.txt"), "w", encoding="utf-8") as f:
        for s in vocab:
            f.write(s + "\n")
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(full, f, indent=2, sort_keys=True)
        f.write("\n")
    return full

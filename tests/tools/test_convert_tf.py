"""The authors' TensorFlow checkpoints: random models in the variable layout of their tf/model.py,
written as tensor bundles by the test-side writer (tf_bundle_writer.py, written apart from the
reader from the format description), converted with `tools/convert.py tf`, then the C engine's
log-probs against the same weights run through the authors' PyTorch model
(authors_ref/mem_transformer.py) to 1e-4. The TF -> PyTorch name mapping here is the test's own
(from tf/model.py), not the converter's. Also: crc32c and varints against known values, the
same_length window of the TF mask, and clear errors for corrupt, truncated and wrong-dtype data."""
import json
import os
import pickle
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest
import torch
import torch.nn as nn

import mem_transformer as authors
from authors_tf_layout import authors_tf_names
from conftest import engine_nll, randomize, report, run_py, TOOLS
from tf_bundle_writer import write_bundle
from xlconvert import tf_bundle, tf_convert

CONVERT = os.path.join(TOOLS, "convert.py")


# ------------------------------------------------------------------------------------------
# Format primitives

def test_crc32c_known_values():
    assert tf_bundle.crc32c(b"123456789") == 0xE3069283
    assert tf_bundle.crc32c(b"") == 0
    assert tf_bundle.crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 B.4: 32 bytes of zeros
    assert tf_bundle.crc32c(b"\xff" * 32) == 0x62A8AB43  # RFC 3720 B.4: 32 bytes of 0xff
    assert tf_bundle.crc32c(bytes(range(32))) == 0x46DD794E  # RFC 3720 B.4: 0..31
    # continuing a crc equals the crc of the concatenation
    assert tf_bundle.crc32c(b"6789", tf_bundle.crc32c(b"12345")) == 0xE3069283
    m = tf_bundle.mask_crc(0xE3069283)
    assert m != 0xE3069283 and tf_bundle.unmask_crc(m) == 0xE3069283


@pytest.mark.parametrize("n", [65536, 65537, 1 << 18, 999_983])
def test_crc32c_vectorised_equals_bytewise(n):
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    want = tf_bundle._raw_bytes(0xFFFFFFFF, data.tobytes()) ^ 0xFFFFFFFF
    assert tf_bundle.crc32c(data) == want
    data[n // 2] ^= 1
    assert tf_bundle.crc32c(data) != want


def test_varints_and_proto_fields():
    assert tf_bundle.read_varint(b"\x00", 0, "t") == (0, 1)
    assert tf_bundle.read_varint(b"\xac\x02", 0, "t") == (300, 2)
    assert tf_bundle.read_varint(b"\xff\xff\xff\xff\x0f", 0, "t") == (0xFFFFFFFF, 5)
    big = b"\xff" * 9 + b"\x01"  # -1 as an int64
    v, _ = tf_bundle.read_varint(big, 0, "t")
    assert tf_bundle._signed64(v) == -1
    with pytest.raises(tf_bundle.BundleError, match="truncated varint"):
        tf_bundle.read_varint(b"\x80\x80", 0, "t")
    with pytest.raises(tf_bundle.BundleError, match="longer than 10"):
        tf_bundle.read_varint(b"\x80" * 11, 0, "t")
    # field 1 varint 150, field 2 bytes "ab", field 6 fixed32
    msg = b"\x08\x96\x01" + b"\x12\x02ab" + b"\x35" + (0xDEADBEEF).to_bytes(4, "little")
    assert tf_bundle.proto_fields(msg, "t") == [(1, 0, 150), (2, 2, b"ab"), (6, 5, 0xDEADBEEF)]
    with pytest.raises(tf_bundle.BundleError, match="runs past"):
        tf_bundle.proto_fields(b"\x12\x05ab", "t")
    with pytest.raises(tf_bundle.BundleError, match="wire type 3"):
        tf_bundle.proto_fields(b"\x0b", "t")


def visible(mask_row_masked, start_abs):
    return {start_abs + j for j, m in enumerate(mask_row_masked) if not m}


@pytest.mark.parametrize("qlen,mem", [(5, 7), (4, 4), (8, 3)])
def test_tf_same_length_window_is_pytorch_window_of_mem_len_plus_one(qlen, mem):
    """tf/model.py _create_mask with same_length (memory always full, mlen = mem_len, as the
    TF evaluation feeds it) lets each query see mem_len + 1 positions; the PyTorch code's mask
    with mem_len + 1 (its memory then holds mem_len + 1) sees the same absolute positions."""
    t = 100  # absolute position of the segment's first query
    # TF: ones [q, q]; mask = [zeros(q, mlen), strict upper]; same_length adds the strict lower
    # triangle to the first q columns.
    tri_u = np.triu(np.ones((qlen, qlen)), 1)
    tf_mask = np.concatenate([np.zeros((qlen, mem)), tri_u], 1)
    tf_mask[:, :qlen] += np.tril(np.ones((qlen, qlen)), -1)
    # PyTorch (authors_ref _forward) with mem_len' = mem + 1 and a full memory mlen = mem_len'
    m2 = mem + 1
    klen = m2 + qlen
    ones = torch.ones(qlen, klen)
    mask_len = klen - m2
    shift = qlen - mask_len if mask_len > 0 else qlen
    pt_mask = ((torch.triu(ones, 1 + m2) + torch.tril(ones, -shift)) > 0).numpy()
    for i in range(qlen):
        tf_set = visible(tf_mask[i] > 0, t - mem)
        pt_set = visible(pt_mask[i], t - m2)
        assert tf_set == pt_set == set(range(t + i - mem, t + i + 1))


# ------------------------------------------------------------------------------------------
# Random models in the TF layout, and the same weights in the authors' PyTorch model

class OwnBias(nn.Module):
    """A decoder layer with its own r_w_bias / r_r_bias (untie_r): the authors' PyTorch layer
    called with this layer's biases instead of the model-level pair."""

    def __init__(self, layer, u, v):
        super().__init__()
        self.layer = layer
        self.u = nn.Parameter(u)
        self.v = nn.Parameter(v)

    def forward(self, x, r, u, v, mask, mems):
        return self.layer(x, r, self.u, self.v, mask, mems)


def make_models(kw, seed, untie_r, proj_same_dim=True):
    """(reference PyTorch model, {TF variable name: array}) with the same random weights."""
    torch.manual_seed(seed)
    ref = randomize(authors.MemTransformerLM(**kw), seed).eval()
    g = torch.Generator().manual_seed(seed + 1000)
    L, H, Dh = kw["n_layer"], kw["n_head"], kw["d_head"]
    D, E, div = kw["d_model"], kw["d_embed"], kw["div_val"]
    cut = list(kw["cutoffs"])
    for mod in ref.modules():
        if isinstance(mod, nn.LayerNorm):
            mod.eps = 1e-12  # tf.contrib.layers.layer_norm
    tf = {}
    P = "transformer/"

    def a(t):
        return t.detach().numpy().astype(np.float32).copy()

    if untie_r:
        u = 0.3 * torch.randn(L, H, Dh, generator=g)
        v = 0.3 * torch.randn(L, H, Dh, generator=g)
        ref.layers = nn.ModuleList([OwnBias(ref.layers[i], u[i], v[i]) for i in range(L)])
        tf[P + "r_w_bias"], tf[P + "r_r_bias"] = a(u), a(v)
    else:
        tf[P + "r_w_bias"], tf[P + "r_r_bias"] = a(ref.r_w_bias), a(ref.r_r_bias)
    we = ref.word_emb
    if div == 1:
        tf[P + "adaptive_embed/lookup_table"] = a(we.emb_layers[0].weight)
        if D != E:
            tf[P + "adaptive_embed/proj_W"] = a(we.emb_projs[0]).T.copy()
    else:
        for i in range(len(cut) + 1):
            tf[P + f"adaptive_embed/cutoff_{i}/lookup_table"] = a(we.emb_layers[i].weight)
            if i == 0 and not proj_same_dim:  # no projection variable: the identity
                with torch.no_grad():
                    we.emb_projs[0].copy_(torch.eye(D))
                continue
            tf[P + f"adaptive_embed/cutoff_{i}/proj_W"] = a(we.emb_projs[i]).T.copy()
    for n in range(L):
        lay = ref.layers[n].layer if untie_r else ref.layers[n]
        at, ff = lay.dec_attn, lay.pos_ff
        p = f"{P}layer_{n}/"
        tf[p + "rel_attn/qkv/kernel"] = a(at.qkv_net.weight).T.copy()
        tf[p + "rel_attn/r/kernel"] = a(at.r_net.weight).T.copy()
        tf[p + "rel_attn/o/kernel"] = a(at.o_net.weight).T.copy()
        tf[p + "rel_attn/LayerNorm/gamma"] = a(at.layer_norm.weight)
        tf[p + "rel_attn/LayerNorm/beta"] = a(at.layer_norm.bias)
        tf[p + "ff/layer_1/kernel"] = a(ff.CoreNet[0].weight).T.copy()
        tf[p + "ff/layer_1/bias"] = a(ff.CoreNet[0].bias)
        tf[p + "ff/layer_2/kernel"] = a(ff.CoreNet[3].weight).T.copy()
        tf[p + "ff/layer_2/bias"] = a(ff.CoreNet[3].bias)
        tf[p + "ff/LayerNorm/gamma"] = a(ff.layer_norm.weight)
        tf[p + "ff/LayerNorm/beta"] = a(ff.layer_norm.bias)
    crit = ref.crit
    sm = P + "adaptive_softmax/"
    if not cut:
        tf[sm + "bias"] = a(crit.out_layers[0].bias)
    else:
        # the authors' PyTorch crit reads tail cluster i from row n_clusters - i; tf/model.py
        # from row i - 1
        tf[sm + "cutoff_0/cluster_W"] = a(crit.cluster_weight)[::-1].copy()
        tf[sm + "cutoff_0/cluster_b"] = a(crit.cluster_bias)[::-1].copy()
        ends = [0] + cut + [kw["n_token"]]
        tie_projs = kw["tie_projs"]
        for i in range(len(cut) + 1):
            if div == 1:
                tf[sm + f"cutoff_{i}/b"] = a(crit.out_layers[0].bias)[ends[i]:ends[i + 1]].copy()
            else:
                tf[sm + f"cutoff_{i}/b"] = a(crit.out_layers[i].bias)
            if tie_projs[i]:
                continue
            proj = crit._proj(i)
            if proj is None:
                continue
            if div > 1 and i == 0 and not proj_same_dim:
                with torch.no_grad():
                    proj.copy_(torch.eye(D))
                continue
            tf[sm + f"cutoff_{i}/proj"] = a(proj).T.copy()
    # training-only variables a real checkpoint carries (skipped by the converter)
    tf["global_step"] = np.array(1191000, dtype=np.int64)
    tf[P + "layer_0/ff/layer_1/kernel/Adam"] = np.zeros_like(tf[P + "layer_0/ff/layer_1/kernel"])
    return ref, tf


def fake_modules():
    """Stand-ins for the authors' tf/data_utils.py and tf/vocabulary.py so a cache.pkl can be
    pickled under their module names (the converter never imports them)."""
    du = types.ModuleType("data_utils")
    vo = types.ModuleType("vocabulary")

    class Vocab:
        pass

    class Corpus:
        pass

    Vocab.__module__, Vocab.__qualname__ = "vocabulary", "Vocab"
    Corpus.__module__, Corpus.__qualname__ = "data_utils", "Corpus"
    vo.Vocab, du.Corpus = Vocab, Corpus
    return du, vo


def write_cache_pkl(path, syms, dataset, special):
    du, vo = fake_modules()
    saved = {k: sys.modules.get(k) for k in ("data_utils", "vocabulary")}
    sys.modules["data_utils"], sys.modules["vocabulary"] = du, vo
    try:
        v = vo.Vocab()
        v.__dict__.update(special=special, min_freq=0, max_size=None, lower_case=True,
                          delimiter=None, vocab_file=None, idx2sym=list(syms),
                          sym2idx={s: i for i, s in enumerate(syms)})
        c = du.Corpus()
        ids = np.arange(1000, dtype=np.int64) % len(syms)
        c.__dict__.update(dataset=dataset, vocab=v, train=ids, valid=ids[:100], test=ids[:50],
                          cutoffs=[])
        with open(path, "wb") as f:
            pickle.dump(c, f, protocol=2)
    finally:
        for k, m in saved.items():
            if m is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = m


def archive(tmp_path, name, tf, syms, dataset, cutoffs, num_shards, vocab="pkl"):
    """The released archive layout: NAME/model/{checkpoint, model.ckpt-0.*}, NAME/data/."""
    root = tmp_path / name
    (root / "model").mkdir(parents=True)
    (root / "data").mkdir()
    write_bundle(str(root / "model" / "model.ckpt-0"), tf, num_shards=num_shards)
    (root / "model" / "checkpoint").write_text(
        'model_checkpoint_path: "/home/zihang/exp/model.ckpt-0"\n'
        'all_model_checkpoint_paths: "/home/zihang/exp/model.ckpt-0"\n')
    info = {"vocab_size": len(syms), "cutoffs": [0] + cutoffs + [len(syms)] if cutoffs else [],
            "dataset": dataset}
    (root / "data" / "corpus-info.json").write_text(json.dumps(info))
    if vocab == "pkl":
        write_cache_pkl(root / "data" / "cache.pkl", syms, dataset,
                        ["<eos>"] if dataset == "wt103" else [])
    return root


def engine_model(engine, out, tmp_path):
    """OUT itself, or (when this engine build predates the character tokenizers) a copy whose
    config names the words tokenizer: the weights are what is compared here."""
    r = subprocess.run([engine, "info", "--model", str(out)], capture_output=True, text=True,
                       timeout=120)
    if r.returncode == 0:
        return out
    assert "xlserve_tokenizer" in r.stderr + r.stdout, r.stderr + r.stdout
    alt = tmp_path / (out.name + "_words")
    if alt.exists():
        return alt
    alt.mkdir()
    cfg = json.loads((out / "config.json").read_text())
    cfg["xlserve_tokenizer"] = "words"
    cfg.pop("xlserve_tokenizer_options", None)
    (alt / "config.json").write_text(json.dumps(cfg))
    for f in ("model.safetensors", "vocab.txt"):
        os.symlink(out / f, alt / f)
    return alt


def random_ids(n_token, n, seed):
    g = np.random.default_rng(seed)
    ids = np.minimum((g.pareto(0.6, size=n) * 7).astype(np.int64), n_token - 1)
    ids[::5] = g.integers(0, n_token, size=len(ids[::5]))
    return torch.from_numpy(ids)


def parity(engine, tmp_path, out, ref, n_token, tgt_len, name, seed=5, extra=()):
    ids = random_ids(n_token, 70, seed)
    want = ref.eval_nll(ids, tgt_len).double().numpy()
    got = engine_nll(engine, engine_model(engine, out, tmp_path), ids.tolist(), tgt_len,
                     tmp_path, extra)
    d = float(np.abs(got - want).max())
    report(name, d)
    assert d < 1e-4, f"{name}: max diff {d}"


ENWIK8_LIKE = dict(n_token=60, n_layer=2, n_head=4, d_model=32, d_head=8, d_inner=64,
                   d_embed=32, div_val=1, cutoffs=[], tie_weight=True, tie_projs=[True],
                   pre_lnorm=False, tgt_len=8, same_length=True, clamp_len=20)
TEXT8_LIKE = dict(n_token=27, n_layer=2, n_head=2, d_model=24, d_head=12, d_inner=48,
                  d_embed=16, div_val=1, cutoffs=[], tie_weight=True, tie_projs=[True],
                  pre_lnorm=False, tgt_len=6, same_length=False, clamp_len=-1)
WT103_LIKE = dict(n_token=300, n_layer=2, n_head=4, d_model=32, d_head=8, d_inner=64,
                  d_embed=32, div_val=2, cutoffs=[40, 120, 200], tie_weight=True,
                  tie_projs=[False, True, True, True], pre_lnorm=False, tgt_len=8,
                  same_length=True, clamp_len=12)
LM1B_LIKE = dict(n_token=200, n_layer=2, n_head=2, d_model=16, d_head=8, d_inner=32,
                 d_embed=16, div_val=2, cutoffs=[50, 150], tie_weight=True,
                 tie_projs=[False, False, False], pre_lnorm=False, tgt_len=5,
                 same_length=True, clamp_len=-1)
DIV1_CUTOFFS = dict(n_token=260, n_layer=2, n_head=2, d_model=24, d_head=12, d_inner=48,
                    d_embed=16, div_val=1, cutoffs=[50, 150], tie_weight=True,
                    tie_projs=[False, True, True], pre_lnorm=False, tgt_len=6,
                    same_length=False, clamp_len=-1)


def build(kw, seed, untie_r, tf_mem_len, proj_same_dim=True):
    """The reference runs with the converted config's mem_len: TF's + 1 under same_length."""
    mem = tf_mem_len + (1 if kw["same_length"] else 0)
    return make_models(dict(kw, mem_len=mem), seed, untie_r, proj_same_dim)


def convert(*args):
    return run_py([CONVERT, *map(str, args)])


@pytest.mark.parametrize("kw,untie_r,same_dim", [
    (ENWIK8_LIKE, False, True), (TEXT8_LIKE, True, True), (WT103_LIKE, True, True),
    (LM1B_LIKE, True, False), (DIV1_CUTOFFS, False, True)])
def test_test_mapping_gives_the_authors_variables(kw, untie_r, same_dim):
    """The TF variables this test makes from the PyTorch model are exactly those tf/model.py
    creates for the configuration (authors_tf_layout.py, listed independently)."""
    _, tf = build(kw, 0, untie_r, 4, same_dim)
    conf = dict(kw, untie_r=untie_r, proj_same_dim=same_dim)
    want = dict(authors_tf_names(conf))
    got = {k: v.shape for k, v in tf.items() if k.startswith("transformer/")
           and not k.endswith("/Adam")}
    assert got == want


def test_enwik8_like(tmp_path, engine):
    """div_val 1, no cutoffs, shared r biases, same_length; the released archive directory
    (checkpoint file, cache.pkl, corpus-info.json) as the source, converted without torch;
    byte_table vocabulary."""
    ref, tf = build(ENWIK8_LIKE, 1, untie_r=False, tf_mem_len=12)
    syms = [str(b) for b in (32, 101, 116, 97, 111)] + [str(b) for b in range(33, 88)]
    root = archive(tmp_path, "tf_enwik8", tf, syms, "enwik8", [], num_shards=1)
    out = tmp_path / "out"
    # in a process where torch cannot be imported
    block = "import sys; sys.modules['torch'] = None; sys.argv = sys.argv[1:]; " \
            "import runpy; runpy.run_path(sys.argv[0], run_name='__main__')"
    r = run_py(["-c", block, CONVERT, "tf", str(root), str(out), "--mem-len", "12",
                "--tgt-len", "8", "--clamp-len", "20", "--same-length"])
    assert r.returncode == 0, r.stderr
    assert "training-only variables skipped" in r.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["xlserve_tokenizer"] == "byte_table" and cfg["untie_r"] is False
    assert cfg["mem_len"] == 13 and cfg["same_length"] is True and cfg["clamp_len"] == 20
    assert cfg["layer_norm_epsilon"] == 1e-12 and cfg["cutoffs"] == []
    assert (out / "vocab.txt").read_text().split("\n")[:3] == ["32", "101", "116"]
    for tl in (8, 3):
        parity(engine, tmp_path, out, ref, 60, tl, f"TF enwik8-like -> engine (tgt_len {tl})")
    # the newline the authors' preprocessing removed: dropped on request instead of refused
    assert cfg["xlserve_tokenizer_options"]["unknown"] == "refuse"
    r = convert("tf", root, tmp_path / "out_drop", "--mem-len", 12, "--tokenizer-option",
                "unknown=drop")
    assert r.returncode == 0, r.stderr
    cfg2 = json.loads((tmp_path / "out_drop" / "config.json").read_text())
    assert cfg2["xlserve_tokenizer"] == "byte_table"
    assert cfg2["xlserve_tokenizer_options"] == {"unknown": "drop"}


def test_text8_like_multishard(tmp_path, engine):
    """div_val 1 with d_embed != d_model (proj_W shared by the softmax), per-layer r biases,
    no same_length; three data shards; prefix as the source; char_table vocabulary."""
    ref, tf = build(TEXT8_LIKE, 2, untie_r=True, tf_mem_len=10)
    syms = list("_etaoinsrhldcumfpgwybvkxjqz")
    root = archive(tmp_path, "tf_text8", tf, syms, "text8", [], num_shards=3)
    assert len(list((root / "model").glob("model.ckpt-0.data-*-of-00003"))) == 3
    out = tmp_path / "out"
    r = convert("tf", root / "model" / "model.ckpt-0", out, "--mem-len", 10, "--tgt-len", 6)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((out / "config.json").read_text())
    # `pull` with the archive directory gives the same model
    out2 = tmp_path / "out_pull"
    r = convert("pull", root, out2, "--mem-len", 10, "--tgt-len", 6)
    assert r.returncode == 0, r.stderr
    assert (out2 / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()
    assert json.loads((out2 / "config.json").read_text()) == cfg
    assert cfg["xlserve_tokenizer"] == "char_table" and cfg["untie_r"] is True
    assert cfg["xlserve_tokenizer_options"]["space_symbol"] == "_"
    assert cfg["mem_len"] == 10 and cfg["same_length"] is False and cfg["d_embed"] == 16
    parity(engine, tmp_path, out, ref, 27, 6, "TF text8-like (3 shards) -> engine")


def test_wt103_like_multishard_bf16(tmp_path, engine):
    """div_val 2, three tail clusters (cluster rows in TF order), projections shared but the
    first, untie_r, same_length; two shards; words vocabulary from cache.pkl; then the same
    checkpoint with --weights bf16 stored and compared with its own tolerance."""
    ref, tf = build(WT103_LIKE, 3, untie_r=True, tf_mem_len=14)
    syms = ["<eos>", "<unk>"] + [f"w{i}" for i in range(298)]
    root = archive(tmp_path, "tf_wt103", tf, syms, "wt103", [40, 120, 200], num_shards=2)
    out = tmp_path / "out"
    r = convert("tf", root / "model", out, "--mem-len", 14, "--tgt-len", 8, "--clamp-len", 12,
                "--same-length")
    assert r.returncode == 0, r.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["cutoffs"] == [40, 120, 200] and cfg["div_val"] == 2
    assert cfg["tie_projs"] == [False, True, True, True] and cfg["xlserve_tokenizer"] == "words"
    for tl in (8, 1):
        parity(engine, tmp_path, out, ref, 300, tl, f"TF wt103-like -> engine (tgt_len {tl})")
    # the cluster order matters: with the rows reversed the model differs
    from xlmodel import safetensors_io
    t, meta = safetensors_io.read(str(out / "model.safetensors"))
    assert meta["source"] == "tensorflow"
    t["crit.cluster_weight"] = t["crit.cluster_weight"][::-1].copy()
    t["crit.cluster_bias"] = t["crit.cluster_bias"][::-1].copy()
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    safetensors_io.write(str(wrong / "model.safetensors"), t)
    shutil.copy(out / "config.json", wrong / "config.json")
    shutil.copy(out / "vocab.txt", wrong / "vocab.txt")
    ids = random_ids(300, 70, 5)
    want = ref.eval_nll(ids, 8).double().numpy()
    got = engine_nll(engine, wrong, ids.tolist(), 8, tmp_path)
    assert float(np.abs(got - want).max()) > 0.1
    # bf16 storage: half the matrix bytes, F32 for biases / LayerNorm / r biases / clusters
    out16 = tmp_path / "out16"
    r = convert("tf", root, out16, "--mem-len", 14, "--tgt-len", 8, "--clamp-len", 12,
                "--same-length", "--weights", "bf16")
    assert r.returncode == 0, r.stderr
    hdr = json.loads(open(out16 / "model.safetensors", "rb").read()[8:][:int.from_bytes(
        open(out16 / "model.safetensors", "rb").read(8), "little")])
    assert hdr["transformer.layers.0.dec_attn.qkv_net.weight"]["dtype"] == "BF16"
    assert hdr["crit.cluster_weight"]["dtype"] == "F32"
    assert hdr["transformer.layers.1.dec_attn.r_w_bias"]["dtype"] == "F32"
    got16 = engine_nll(engine, out16, ids.tolist(), 8, tmp_path)
    d16 = float(np.abs(got16 - want).max())
    report("TF wt103-like stored bf16 -> engine", d16)
    assert 0 < d16 < 0.1


def test_lm1b_like_untied_projections(tmp_path, engine):
    """lm1b's flags at a small size: div_val 2, proj_same_dim false (no projection variables
    for the first cluster: the identity), proj_share_all_but_first false (every tail cluster has
    its own softmax projection); the authors' vocab file form ("symbol count" lines)."""
    ref, tf = build(LM1B_LIKE, 4, untie_r=True, tf_mem_len=9, proj_same_dim=False)
    assert "transformer/adaptive_embed/cutoff_0/proj_W" not in tf
    assert "transformer/adaptive_softmax/cutoff_2/proj" in tf
    syms = ["<S>", "</S>", "<UNK>"] + [f"W{i}" for i in range(197)]
    root = archive(tmp_path, "tf_lm1b", tf, syms, "lm1b", [50, 150], num_shards=2, vocab="txt")
    vocab = root / "data" / "1b_word_vocab.txt"
    vocab.write_text("".join(f"{s} {1000 - i}\n" for i, s in enumerate(syms)))
    out = tmp_path / "out"
    r = convert("tf", root, out, "--vocab", vocab, "--mem-len", 9, "--tgt-len", 5,
                "--same-length")
    assert r.returncode == 0, r.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["tie_projs"] == [False, False, False]
    assert cfg["xlserve_tokenizer_options"]["eos_token"] == "<S>"
    assert (out / "vocab.txt").read_text().splitlines()[:3] == ["<S>", "</S>", "<UNK>"]
    parity(engine, tmp_path, out, ref, 200, 5, "TF lm1b-like -> engine")


def test_div_val_1_with_cutoffs(tmp_path, engine):
    """Not a released configuration, but tf/model.py allows it: one table, the softmax biases
    per cluster (concatenated), a projection per cluster (the first untied)."""
    ref, tf = build(DIV1_CUTOFFS, 5, untie_r=False, tf_mem_len=10)
    syms = ["<eos>", "<unk>"] + [f"w{i}" for i in range(258)]
    root = archive(tmp_path, "tf_x", tf, syms, "wt103", [50, 150], num_shards=1)
    out = tmp_path / "out"
    r = convert("tf", root, out, "--mem-len", 10, "--tgt-len", 6)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["cutoffs"] == [50, 150] and cfg["tie_projs"] == [False, True, True]
    parity(engine, tmp_path, out, ref, 260, 6, "TF div_val 1 with cutoffs -> engine")


# ------------------------------------------------------------------------------------------
# Errors

def small_archive(tmp_path, num_shards=2):
    _, tf = build(ENWIK8_LIKE, 7, untie_r=False, tf_mem_len=12)
    syms = [str(b) for b in range(60)]
    return archive(tmp_path, "tf_err", tf, syms, "enwik8", [], num_shards=num_shards), tf


def test_preset_mismatch_and_missing_flags(tmp_path):
    root, _ = small_archive(tmp_path)
    r = convert("tf", root, tmp_path / "o1", "--preset", "enwik8")
    assert r.returncode == 2 and "n_layer 2 (preset enwik8: 24)" in r.stderr
    r = convert("tf", root, tmp_path / "o2")
    assert r.returncode == 2 and "--mem-len" in r.stderr
    (root / "data" / "corpus-info.json").write_text(json.dumps({"vocab_size": 61}))
    r = convert("tf", root, tmp_path / "o3", "--mem-len", 5)
    assert r.returncode == 2
    assert "corpus-info.json: vocab_size 61, the checkpoint has 60" in r.stderr


def test_wrong_dtype_names_the_tensor(tmp_path):
    _, tf = build(ENWIK8_LIKE, 8, untie_r=False, tf_mem_len=12)
    name = "transformer/layer_1/ff/layer_2/kernel"
    root = tmp_path / "m"
    root.mkdir()
    prefix = str(root / "model.ckpt-0")
    write_bundle(prefix, tf, dtype_override={name: 19})  # DT_HALF
    b = tf_bundle.Bundle(prefix)
    assert b.entries[name].dtype_name == "DT_HALF"
    with pytest.raises(tf_bundle.BundleError, match=f"tensor {name}: dtype DT_HALF"):
        b.read(name)
    syms = tmp_path / "v.txt"
    syms.write_text("".join(f"{i}\n" for i in range(60)))
    r = convert("tf", prefix, tmp_path / "o", "--vocab", syms, "--mem-len", 4)
    assert r.returncode == 2 and f"tensor {name}: dtype DT_HALF" in r.stderr
    assert not (tmp_path / "o" / "model.safetensors").exists()


def test_corrupt_checksum_names_the_tensor(tmp_path):
    root, tf = small_archive(tmp_path, num_shards=1)
    prefix = str(root / "model" / "model.ckpt-0")
    name = "transformer/layer_0/rel_attn/o/kernel"
    assert np.array_equal(tf_bundle.Bundle(prefix).read(name), tf[name])
    write_bundle(prefix, tf, corrupt_crc=name)
    b = tf_bundle.Bundle(prefix)
    with pytest.raises(tf_bundle.BundleError, match=f"tensor {name}: checksum mismatch"):
        b.read(name)
    r = convert("tf", root, tmp_path / "o", "--mem-len", 4)
    assert r.returncode == 2 and f"tensor {name}: checksum mismatch" in r.stderr
    assert not (tmp_path / "o" / "model.safetensors").exists()
    assert not (tmp_path / "o" / "model.safetensors.partial").exists()


def test_truncated_shard_names_the_tensor(tmp_path):
    root, tf = small_archive(tmp_path, num_shards=2)
    prefix = str(root / "model" / "model.ckpt-0")
    tf = {k: v for k, v in tf.items() if k.startswith("transformer/") and "/Adam" not in k}
    man = write_bundle(prefix, tf, num_shards=2, truncate_shard=1)
    b = tf_bundle.Bundle(prefix)
    last = b.entries[man["truncated"]]
    assert last.shard_id == 1
    with pytest.raises(tf_bundle.BundleError, match=f"truncated: tensor {last.name} needs"):
        b.read(last.name)
    r = convert("tf", root, tmp_path / "o", "--mem-len", 4)
    assert r.returncode == 2 and f"truncated: tensor {last.name} needs" in r.stderr


def test_partitioned_variable_refused(tmp_path):
    _, tf = build(ENWIK8_LIKE, 10, untie_r=False, tf_mem_len=12)
    name = "transformer/adaptive_embed/lookup_table"
    prefix = str(tmp_path / "model.ckpt-0")
    write_bundle(prefix, tf, slices={name: 3})
    b = tf_bundle.Bundle(prefix)
    with pytest.raises(tf_bundle.BundleError, match=f"tensor {name}: stored as 3 slices"):
        b.read(name)
    syms = tmp_path / "v.txt"
    syms.write_text("".join(f"{i}\n" for i in range(60)))
    r = convert("tf", prefix, tmp_path / "o", "--vocab", syms, "--mem-len", 4)
    assert r.returncode == 2 and f"tensor {name}: stored as 3 slices" in r.stderr


def test_corrupt_index(tmp_path):
    root, tf = small_archive(tmp_path, num_shards=1)
    prefix = str(root / "model" / "model.ckpt-0")
    index = root / "model" / "model.ckpt-0.index"
    data = index.read_bytes()
    write_bundle(prefix, tf, corrupt_index_block=True)
    with pytest.raises(tf_bundle.BundleError, match="index: data block .*checksum mismatch"):
        tf_bundle.Bundle(prefix)
    index.write_bytes(bytes(data[:-1]))
    with pytest.raises(tf_bundle.BundleError, match="not a TensorFlow checkpoint"):
        tf_bundle.Bundle(str(root / "model" / "model.ckpt-0"))
    index.write_bytes(b"x" * 100)
    r = convert("tf", root, tmp_path / "o", "--mem-len", 4)
    assert r.returncode == 2 and "model.ckpt-0.index: no table magic" in r.stderr


@pytest.mark.parametrize("opts", [dict(num_shards=3), dict(num_shards=2, align=64, big_endian=True),
                                  dict(block_size=256, restart_interval=3)])
def test_bundle_reads_back_every_tensor(tmp_path, opts):
    """Every float tensor the writer stored comes back bit for bit: across shards, with padded
    alignment and big-endian data, and with many small table blocks and restart points."""
    _, tf = build(WT103_LIKE, 9, untie_r=True, tf_mem_len=4)
    prefix = str(tmp_path / "ckpt")
    write_bundle(prefix, tf, **opts)
    b = tf_bundle.Bundle(prefix)
    n = opts.get("num_shards", 1)
    assert b.header.num_shards == n and set(b.entries) == set(tf)
    assert {e.shard_id for e in b.entries.values()} == set(range(n))
    for name, want in tf.items():
        if want.dtype == np.float32:
            got = b.read(name)
            assert got.dtype == np.float32 and np.array_equal(got, want), name
    with pytest.raises(tf_bundle.BundleError, match="global_step: dtype DT_INT64"):
        b.read("global_step")


def test_python2_cache_pickle_symbols_are_utf8(tmp_path):
    """A cache.pkl written by Python 2 holds its words as byte strings (SHORT_BINSTRING); read
    as latin-1 they would be mojibake, so the converter decodes them as UTF-8."""
    words = ["<eos>", "the", "café", "naïve", "Zürich"]
    body = b"".join(b"U" + bytes([len(w.encode())]) + w.encode() for w in words)
    # protocol 2: {"idx2sym": [ ... byte strings ... ]}
    pkl = b"\x80\x02}U\x07idx2sym](" + body + b"es."
    path = tmp_path / "cache.pkl"
    path.write_bytes(pkl)
    assert pickle.loads(pkl, encoding="bytes")[b"idx2sym"][2] == "café".encode()
    syms, _ = tf_convert.read_vocab(str(path), 5)
    assert syms == words
    # a Python 3 pickle (characters past latin-1 in it) is left alone
    path.write_bytes(pickle.dumps({"idx2sym": ["<eos>", "Ã©", "x", "日本", "z"]}, protocol=2))
    assert tf_convert.read_vocab(str(path), 5)[0][1] == "Ã©"


@pytest.mark.parametrize("preset,vocab", [("enwik8", 204), ("text8", 27), ("wt103", 267735),
                                          ("lm1b", 793471)])
def test_presets_fit_the_released_shapes(preset, vocab):
    """At full size, without data: the variables the authors' code creates for each released
    model's flags (authors_tf_layout, recorded independently) give back the preset's
    architecture, and the planned output fits the HF layout (no tensor missing or extra; lm1b
    gets identity projections for its first cluster, which the checkpoint leaves out)."""
    from authors_tf_layout import SOTA_FLAGS
    from xlconvert import tf_presets
    pre = tf_presets.PRESETS[preset]
    for k, v in SOTA_FLAGS[preset].items():
        assert pre[k] == v, (preset, k)

    class Fake:
        index_file = f"{preset}.index"
        entries = {}

    for name, shape in authors_tf_names(dict(SOTA_FLAGS[preset], n_token=vocab)):
        e = tf_bundle.Entry(name)
        e.dtype, e.shape = 1, shape
        Fake.entries[name] = e
    arch = tf_convert.infer_arch(Fake)
    for k in tf_presets.ARCH_KEYS:
        assert arch[k] == pre[k], (preset, k, arch[k])
    assert arch["vocab_size"] == vocab
    outs, skipped = tf_convert.plan(Fake, arch)
    assert not skipped
    cfg = dict(arch, tie_word_embeddings=True)
    tf_convert.check_plan(cfg, outs, preset)
    n_out = sum(int(np.prod(o.shape)) for o in outs)
    n_tf = sum(int(np.prod(e.shape)) for e in Fake.entries.values())
    # lm1b stores two identity [1280, 1280] projections the checkpoint leaves out
    assert n_out - n_tf == (2 * 1280 * 1280 if preset == "lm1b" else 0)

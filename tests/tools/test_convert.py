"""Converter tests: random models in both source layouts (the authors' MemTransformerLM, re-stated
in authors_ref/mem_transformer.py, and the HF TransfoXLLMHeadModel layout of xltrain.model),
saved the ways those codes save them, converted with tools/convert.py, then the C engine's
log-probs against the source model run in PyTorch (1e-4). Also: untrusted pickles are never
executed, errors name what could not be mapped, and conversion works without torch."""
import collections
import json
import os
import pickle

import numpy as np
import pytest
import torch

import mem_transformer as authors
from conftest import engine_nll, randomize, report, run_py, TOOLS
from xlconvert import sources, torchfile
from xlmodel import safetensors_io
from xltrain.model import TransfoXLLM, XLConfig, evaluate_stream, load_model_dir

CONVERT = os.path.join(TOOLS, "convert.py")


def words(n):
    return ["<eos>", "<unk>"] + [f"w{i}" for i in range(n - 2)]


def random_ids(n_token, n, seed):
    g = np.random.default_rng(seed)
    # Zipf-ish so every cluster is visited but the head dominates.
    ids = np.minimum((g.pareto(0.6, size=n) * 7).astype(np.int64), n_token - 1)
    ids[::5] = g.integers(0, n_token, size=len(ids[::5]))
    return torch.from_numpy(ids)


def convert(*args):
    r = run_py([CONVERT, *map(str, args)])
    return r


def compare(engine, tmp_path, out_dir, ref, ids, tgt_len, name):
    got = engine_nll(engine, out_dir, ids.tolist(), tgt_len, tmp_path)
    d = float(np.abs(got - ref).max())
    report(name, d)
    assert d < 1e-4, f"{name}: max diff {d}"


# ------------------------------------------------------------------------------------------
# Authors' layout

AUTHORS_A = dict(n_token=300, n_layer=2, n_head=4, d_model=32, d_head=8, d_inner=64,
                 d_embed=32, div_val=2, cutoffs=[40, 120, 200], tie_weight=True,
                 tie_projs=[False, True, True, True], pre_lnorm=False, tgt_len=8, mem_len=16,
                 same_length=True, clamp_len=20)
AUTHORS_B = dict(n_token=260, n_layer=2, n_head=2, d_model=24, d_head=12, d_inner=48,
                 d_embed=16, div_val=1, cutoffs=[50, 150], tie_weight=True,
                 tie_projs=[False, True, True], pre_lnorm=True, tgt_len=6, mem_len=10,
                 same_length=False, clamp_len=-1)


def authors_model(kw, seed):
    return randomize(authors.MemTransformerLM(**kw), seed).eval()


def test_authors_state_dict(tmp_path, engine):
    """state_dict (zip format) + the run script's flags; div_val 2, three tail clusters."""
    m = authors_model(AUTHORS_A, 1)
    ckpt = tmp_path / "model_state.pt"
    torch.save(m.state_dict(), ckpt)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(words(300)) + "\n")
    ids = random_ids(300, 90, 5)
    ref = m.eval_nll(ids, 8).double().numpy()
    out = tmp_path / "out"
    r = convert("authors", ckpt, out, "--vocab", vocab, "--mem_len", 16, "--same_length",
                "--clamp_len", 20, "--tgt_len", 8)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["untie_r"] is False and cfg["cutoffs"] == [40, 120, 200] and cfg["div_val"] == 2
    assert cfg["tie_projs"] == [False, True, True, True] and cfg["same_length"] is True
    assert (out / "vocab.txt").read_text().split("\n")[:3] == ["<eos>", "<unk>", "w0"]
    # HF semantics in PyTorch (reversed cluster rows) equal the authors' model ...
    hf = load_model_dir(out)
    hf_nll = evaluate_stream(hf, ids, 8).double().numpy()
    d = float(np.abs(hf_nll - ref).max())
    report("authors (state_dict) vs converted, PyTorch HF semantics", d)
    assert d < 1e-4
    # ... and without the reversal they would not.
    t, _ = safetensors_io.read(str(out / "model.safetensors"))
    with torch.no_grad():
        hf.crit.cluster_weight.copy_(torch.from_numpy(t["crit.cluster_weight"][::-1].copy()))
        hf.crit.cluster_bias.copy_(torch.from_numpy(t["crit.cluster_bias"][::-1].copy()))
    wrong = float(np.abs(evaluate_stream(hf, ids, 8).double().numpy() - ref).max())
    assert wrong > 0.1, f"cluster order made no difference ({wrong})"
    for tl in (8, 3):
        compare(engine, tmp_path, out, ref, ids, tl, f"authors state_dict -> engine (tgt_len {tl})")


class Corpus:  # stands for the authors' data_utils.Corpus pickled in cache.pt
    def __init__(self, syms):
        self.vocab = types_vocab(syms)
        self.dataset = "toy"


class Vocab:
    def __init__(self, syms):
        self.idx2sym = list(syms)
        self.sym2idx = collections.OrderedDict((s, i) for i, s in enumerate(syms))
        self.counter = collections.Counter(syms)


def types_vocab(syms):
    return Vocab(syms)


@pytest.mark.parametrize("zipped", [False, True])
def test_authors_whole_pickled_model(tmp_path, engine, zipped):
    """The whole MemTransformerLM as train.py saves it (legacy and zip torch.save formats):
    hyperparameters come from the pickle; div_val 1 with projections, pre-LN, no same_length."""
    m = authors_model(AUTHORS_B, 2)
    ckpt = tmp_path / "model.pt"
    torch.save(m, ckpt, _use_new_zipfile_serialization=zipped)
    cache = tmp_path / "cache.pt"
    torch.save(Corpus(words(260)), cache, _use_new_zipfile_serialization=zipped)
    ids = random_ids(260, 70, 6)
    ref = m.eval_nll(ids, 6).double().numpy()
    out = tmp_path / "out"
    r = convert("authors", ckpt, out, "--vocab", cache)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["pre_lnorm"] is True and cfg["same_length"] is False
    assert cfg["mem_len"] == 10 and cfg["tgt_len"] == 6 and cfg["cutoffs"] == [50, 150]
    assert cfg["d_embed"] == 16 and cfg["tie_projs"] == [False, True, True]
    compare(engine, tmp_path, out, ref, ids, 6,
            f"authors whole model ({'zip' if zipped else 'legacy'}) -> engine")


def test_authors_errors(tmp_path):
    kw = dict(AUTHORS_B, div_val=1)
    m = authors_model(kw, 3)
    ckpt = tmp_path / "sd.pt"
    torch.save(m.state_dict(), ckpt)
    r = convert("authors", ckpt, tmp_path / "o1", "--tokenizer", "words", "--mem_len", 10)
    assert r.returncode == 2 and "--cutoffs" in r.stderr and str(ckpt) in r.stderr
    sd = m.state_dict()
    del sd["layers.1.dec_attn.o_net.weight"]
    torch.save(sd, ckpt)
    vocab = tmp_path / "v.txt"
    vocab.write_text("\n".join(words(260)) + "\n")
    r = convert("authors", ckpt, tmp_path / "o2", "--vocab", vocab, "--mem_len", 10,
                "--cutoffs", "50,150")
    assert r.returncode == 2 and "layers.1.dec_attn.o_net.weight" in r.stderr
    sd["layers.1.dec_attn.o_net.weight"] = torch.zeros(24, 24)
    sd["some.extra.weight"] = torch.zeros(3)
    torch.save(sd, ckpt)
    r = convert("authors", ckpt, tmp_path / "o3", "--vocab", vocab, "--mem_len", 10,
                "--cutoffs", "50,150")
    assert r.returncode == 2 and "some.extra.weight" in r.stderr
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint at all")
    r = convert("authors", tmp_path / "junk.pt", tmp_path / "o4")
    assert r.returncode == 2 and "junk.pt" in r.stderr


class Evil:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_untrusted_pickle_is_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    e = Evil()
    e.marker = marker
    for path, dump in ((tmp_path / "evil.pkl", lambda f: pickle.dump({"idx2sym": e}, f)),
                       (tmp_path / "evil.pt", lambda f: torch.save({"model": e}, f))):
        with open(path, "wb") as f:
            dump(f)
        loaded = torchfile.load(str(path))
        assert "posix.system" in loaded.foreign_globals or "os.system" in loaded.foreign_globals
        r = convert("authors", path, tmp_path / "o")
        assert r.returncode == 2
    # a complete HF directory whose vocab.pkl is the evil pickle: convert_hf gets as far as
    # unpickling it (with inert stand-ins) and refuses it
    m = hf_model(14)
    src = tmp_path / "hf"
    src.mkdir()
    safetensors_io.write(str(src / "model.safetensors"), m.hf_tensors())
    (src / "config.json").write_text(json.dumps(hf_config_json(m)))
    (src / "vocab.pkl").write_bytes((tmp_path / "evil.pkl").read_bytes())
    r = convert("hf", src, tmp_path / "o5")
    assert r.returncode == 2 and "vocab.pkl" in r.stderr, r.stderr
    assert not marker.exists(), "a pickled callable was executed"


# ------------------------------------------------------------------------------------------
# Hugging Face layout

HF_CFG = XLConfig(vocab_size=300, cutoffs=[40, 120, 200], d_model=32, d_embed=64, n_head=4,
                  d_head=8, d_inner=64, div_val=2, n_layer=2, tgt_len=8, mem_len=16,
                  clamp_len=12, same_length=True, untie_r=True,
                  tie_projs=[False, True, True, True], dropout=0.0)


def hf_model(seed):
    return randomize(TransfoXLLM(HF_CFG), seed).eval()


def hf_config_json(m, old_keys=False):
    c = m.hf_config()
    if old_keys:  # the keys of the 2019 transfo-xl-wt103 config
        c["n_token"] = c.pop("vocab_size")
        c["tie_weight"] = c.pop("tie_word_embeddings")
    return c


class TransfoXLTokenizerStandIn:  # an arbitrary class inside a vocab pickle
    pass


def write_vocab_pkl(path, syms):
    d = {"idx2sym": list(syms), "sym2idx": collections.OrderedDict((s, i) for i, s in
                                                                    enumerate(syms)),
         "counter": collections.Counter(syms), "special": ["<eos>"], "lower_case": False,
         "moses": TransfoXLTokenizerStandIn()}
    with open(path, "wb") as f:
        pickle.dump(d, f)


def test_hf_pytorch_model_bin(tmp_path, engine):
    """pytorch_model.bin (legacy torch.save of the state_dict, tied duplicates and the
    pos_emb buffer included), 2019-style config keys, vocab.pkl; div_val 2, per-layer r biases."""
    m = hf_model(11)
    src = tmp_path / "hf"
    src.mkdir()
    sd = collections.OrderedDict(m.state_dict())
    sd["transformer.pos_emb.inv_freq"] = 1.0 / (10000 ** (torch.arange(0.0, 32, 2.0) / 32))
    torch.save(sd, src / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    (src / "config.json").write_text(json.dumps(hf_config_json(m, old_keys=True)))
    write_vocab_pkl(src / "vocab.pkl", words(300))
    ids = random_ids(300, 80, 7)
    ref = evaluate_stream(m, ids, 8).double().numpy()
    out = tmp_path / "out"
    # the numbers are what this test checks: the words tokenizer (the vocab.pkl -> transfo_xl
    # choice is tested in test_vocab_kinds.py)
    r = convert("hf", src, out, "--tokenizer", "words")
    assert r.returncode == 0, r.stderr
    assert (out / "vocab.txt").read_text().splitlines()[5] == "w3"
    for tl in (8, 1):
        compare(engine, tmp_path, out, ref, ids, tl, f"HF pytorch_model.bin -> engine (tgt_len {tl})")


def test_hf_safetensors_without_torch(tmp_path, engine):
    """model.safetensors without the tied duplicates (as HF saves it) + vocab.bin (torch.save
    of the tokenizer dict), converted in a process where torch cannot be imported."""
    m = hf_model(12)
    src = tmp_path / "hf"
    src.mkdir()
    t = m.hf_tensors()
    for name in [k for k in t if k.startswith("crit.out_layers.") and k.endswith(".weight")]:
        del t[name]
    for i in (1, 2, 3):
        del t[f"crit.out_projs.{i}"]
    safetensors_io.write(str(src / "model.safetensors"), t)
    (src / "config.json").write_text(json.dumps(hf_config_json(m)))
    torch.save({"idx2sym": words(300), "sym2idx": {s: i for i, s in enumerate(words(300))}},
               src / "vocab.bin")
    ids = random_ids(300, 80, 8)
    ref = evaluate_stream(m, ids, 8).double().numpy()
    out = tmp_path / "out"
    block = "import sys; sys.modules['torch'] = None; sys.argv = sys.argv[1:]; " \
            "import runpy; runpy.run_path(sys.argv[0], run_name='__main__')"
    r = run_py(["-c", block, CONVERT, "hf", str(src), str(out), "--mem-len", "14",
                "--tokenizer", "words"])
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "config.json").read_text())["mem_len"] == 14
    m.cfg.mem_len = 14
    ref = evaluate_stream(m, ids, 8).double().numpy()
    compare(engine, tmp_path, out, ref, ids, 8, "HF safetensors (no torch) -> engine")


def test_authors_without_torch(tmp_path):
    """The torch-free reader gives the same tensors as torch.load for both file formats."""
    m = authors_model(AUTHORS_A, 4)
    for zipped in (False, True):
        p = tmp_path / f"m{int(zipped)}.pt"
        torch.save(m, p, _use_new_zipfile_serialization=zipped)
        loaded = torchfile.load(str(p))
        state, module = torchfile.find_state_dict(loaded.obj, str(p))
        want = m.state_dict()
        assert set(state) == set(want)
        for k, v in want.items():
            assert np.array_equal(state[k].numpy(), v.numpy()), k
        # shared tensors keep their identity (ties are visible)
        assert state["crit.out_layers.1.weight"].identity() == \
            state["word_emb.emb_layers.1.weight"].identity()
        assert module is not None and torchfile.opaque_attr(module, "mem_len") == 16


def test_hf_errors(tmp_path):
    m = hf_model(13)
    src = tmp_path / "hf"
    src.mkdir()
    t = m.hf_tensors()
    t["transformer.layers.0.dec_attn.qkv_net.weight"] = t[
        "transformer.layers.0.dec_attn.qkv_net.weight"][:10]
    safetensors_io.write(str(src / "model.safetensors"), t)
    (src / "config.json").write_text(json.dumps(hf_config_json(m)))
    write_vocab_pkl(src / "vocab.pkl", words(299))
    with pytest.raises(sources.ConvertError, match="vocab.pkl: 299 symbols"):
        sources.convert_hf(str(src), str(tmp_path / "o"))
    write_vocab_pkl(src / "vocab.pkl", words(300))
    with pytest.raises(sources.ConvertError, match="qkv_net.weight: shape"):
        sources.convert_hf(str(src), str(tmp_path / "o"))

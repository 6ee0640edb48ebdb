"""The tokenizer kind a conversion writes, from the vocabulary file as each code base saves it:
Hugging Face's TransfoXLTokenizer dict (vocab.pkl by pickle, vocab.bin by torch.save in both
torch formats) -> transfo_xl with its options; the paper authors' cache.pt (a Corpus built and
saved by the re-statement of their code in authors_ref/data_utils.py) -> byte_table (enwik8),
char_table (text8), words (wt103, lm1b). The encoded corpus inside cache.pt is never read.
The user's --tokenizer / --tokenizer-option overrides, and their refusals."""
import collections
import json
import os
import pickle
import re
import subprocess
import sys
import tracemalloc
import types
import warnings

import pytest
import torch

import data_utils
import mem_transformer as authors
from conftest import TOOLS, randomize, run_py, xlserve_bin
from xlconvert import sources, torchfile, vocab_kinds
from xlmodel import safetensors_io
from xltrain.model import TransfoXLLM, XLConfig

CONVERT = os.path.join(TOOLS, "convert.py")
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                    "austen-test-excerpt.txt")


def convert(*args):
    return run_py([CONVERT, *map(str, args)])


def engine_info(out_dir):
    """`xlserve info` on a converted directory: it must load, with the kind config.json names.
    A binary that predates the tokenizer kind is reported with a warning and not checked."""
    b = xlserve_bin()
    if b is None:
        pytest.skip("xlserve binary not built (set XLSERVE_BIN)")
    kind = json.loads((out_dir / "config.json").read_text())["xlserve_tokenizer"]
    r = subprocess.run([b, "info", "--model", str(out_dir)], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0 and "'xlserve_tokenizer' must be" in r.stderr:
        warnings.warn(f"{b} does not read the {kind} tokenizer kind yet: not loaded")
        return None
    assert r.returncode == 0, r.stderr
    assert re.search(rf"^tokenizer\s+{kind}\b", r.stdout, re.M), r.stdout
    return r.stdout


# ------------------------------------------------------------------------------------------
# Hugging Face directories

def hf_dir(tmp_path, n_symbols, seed=1):
    """A random HF TransfoXL directory (config.json + model.safetensors) of n_symbols."""
    cfg = XLConfig(vocab_size=n_symbols, d_model=16, d_embed=16, n_head=2, d_head=8,
                   d_inner=32, n_layer=1, tgt_len=8, mem_len=8, dropout=0.0)
    m = randomize(TransfoXLLM(cfg), seed).eval()
    src = tmp_path / "hf"
    src.mkdir(exist_ok=True)
    safetensors_io.write(str(src / "model.safetensors"), m.hf_tensors())
    (src / "config.json").write_text(json.dumps(m.hf_config()))
    return src


def hf_symbols(n):
    return ["<eos>", "<unk>", "the", ",", "."] + [f"w{i}" for i in range(n - 5)]


def _module(name):
    """A module object registered under NAME so pickle can name classes defined in it, the
    way the real tokenizer's objects are named (sacremoses, tokenizers)."""
    parent = None
    for i, part in enumerate(name.split(".")):
        full = ".".join(name.split(".")[:i + 1])
        mod = sys.modules.get(full) or types.ModuleType(full)
        sys.modules[full] = mod
        if parent is not None:
            setattr(parent, part, mod)
        parent = mod
    return mod


def _stand_in_class(module, name):
    mod = _module(module)
    if not hasattr(mod, name):
        cls = type(name, (), {"__module__": module})
        setattr(mod, name, cls)
    return getattr(mod, name)


def tokenizer_dict(style, syms):
    """A TransfoXLTokenizer __dict__ as HF pickles it into vocab.pkl.
    old: the 2019 transfo-xl-wt103 vocabulary (no never_split, no special-token attributes);
    new: a tokenizer of the current transformers (never_split, AddedToken special tokens,
    Moses objects and compiled patterns)."""
    d = {"counter": collections.Counter(syms), "min_freq": 0, "max_size": None,
         "vocab_file": None, "idx2sym": list(syms),
         "sym2idx": collections.OrderedDict((s, i) for i, s in enumerate(syms))}
    if style == "old":
        d.update(special=["<eos>"], lower_case=False, delimiter=None, eos_idx=0)
        return d
    added = _stand_in_class("tokenizers", "AddedToken")

    def tok(content):
        t = added()
        t.content, t.single_word, t.lstrip, t.special = content, False, False, True
        return t
    norm = _stand_in_class("sacremoses.normalize", "MosesPunctNormalizer")()
    norm.lang = "en"
    d.update(special=[], lower_case=True, delimiter=None,
             never_split=["<eos>", "<unk>", "<formula>", "<title>"],
             punctuation_symbols='!"#$%&()*+,-./\\:;<=>?@[\\]^_`{|}~',
             punction_without_space_before_pattern=re.compile(r"[^\s][!,.]"),
             language="en", moses_punct_normalizer=norm,
             _special_tokens_map={"eos_token": tok("<eos>"), "unk_token": tok("<unk>"),
                                  "additional_special_tokens": [tok("<formula>"),
                                                                tok("<title>")]},
             init_kwargs={"lower_case": True, "eos_token": "<eos>", "unk_token": "<unk>"})
    return d


HF_EXPECT = {
    "old": {"lower_case": False, "delimiter": None,
            "never_split": ["<eos>", "<unk>", "<formula>"], "eos_token": "<eos>",
            "unk_token": "<unk>"},
    "new": {"lower_case": True, "delimiter": None,
            "never_split": ["<eos>", "<unk>", "<formula>", "<title>"], "eos_token": "<eos>",
            "unk_token": "<unk>"},
}


@pytest.mark.parametrize("style", ["old", "new"])
@pytest.mark.parametrize("how", ["vocab.pkl", "vocab.bin-legacy", "vocab.bin-zip"])
def test_hf_vocab_gives_transfo_xl(tmp_path, style, how):
    syms = hf_symbols(40)
    src = hf_dir(tmp_path, len(syms))
    d = tokenizer_dict(style, syms)
    if how == "vocab.pkl":
        with open(src / "vocab.pkl", "wb") as f:
            pickle.dump(d, f)
    else:
        torch.save(d, src / "vocab.bin", _use_new_zipfile_serialization=how.endswith("zip"))
    out = tmp_path / "out"
    r = convert("hf", src, out)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["xlserve_tokenizer"] == "transfo_xl"
    assert cfg["xlserve_tokenizer_options"] == HF_EXPECT[style]
    assert (out / "vocab.txt").read_text().splitlines() == syms
    engine_info(out)


def test_hf_tokenizer_config_and_user_overrides(tmp_path):
    """tokenizer_config.json wins over the pickled dict (as HF's init kwargs do); the user's
    --tokenizer-option wins over both; unknown options and ill-typed values are refused."""
    syms = hf_symbols(30)
    src = hf_dir(tmp_path, len(syms))
    with open(src / "vocab.pkl", "wb") as f:
        pickle.dump(tokenizer_dict("old", syms), f)
    (src / "tokenizer_config.json").write_text(json.dumps({"lower_case": True,
                                                           "additional_special_tokens": []}))
    out = tmp_path / "o1"
    r = convert("hf", src, out)
    assert r.returncode == 0, r.stderr
    opts = json.loads((out / "config.json").read_text())["xlserve_tokenizer_options"]
    assert opts["lower_case"] is True and opts["never_split"] == ["<eos>", "<unk>"]
    out = tmp_path / "o2"
    r = convert("hf", src, out, "--tokenizer-option", "lower_case=false",
                "--tokenizer-option", 'never_split=["<eos>","<formula>"]',
                "--tokenizer-option", "delimiter=null")
    assert r.returncode == 0, r.stderr
    opts = json.loads((out / "config.json").read_text())["xlserve_tokenizer_options"]
    assert opts["lower_case"] is False and opts["never_split"] == ["<eos>", "<formula>"]
    r = convert("hf", src, tmp_path / "o3", "--tokenizer-option", "unknown=drop")
    assert r.returncode == 2 and "not an option of the transfo_xl tokenizer" in r.stderr \
        and "never_split" in r.stderr, r.stderr
    r = convert("hf", src, tmp_path / "o4", "--tokenizer-option", "lower_case=maybe")
    assert r.returncode == 2 and "lower_case" in r.stderr and "true or false" in r.stderr
    r = convert("hf", src, tmp_path / "o5", "--tokenizer", "byte_table")
    assert r.returncode == 2 and "'<eos>'" in r.stderr and "vocab.pkl" in r.stderr, r.stderr
    # the words kind on request (a pre-tokenized corpus); it keeps the tokenizer's lowercasing
    out = tmp_path / "o6"
    r = convert("hf", src, out, "--tokenizer", "words")
    assert r.returncode == 0, r.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["xlserve_tokenizer"] == "words"
    assert cfg["xlserve_tokenizer_options"] == {"lower_case": True}


# ------------------------------------------------------------------------------------------
# The authors' cache.pt

def austen_bytes(copies):
    base = open(DATA, "rb").read()
    extra = "Caf\u00e9 na\u00efve \u2014 \u4e2d\u6587 text.\n".encode("utf-8")
    return (base + extra) * copies


def authors_checkpoint(tmp_path, n_token, seed=3):
    m = randomize(authors.MemTransformerLM(n_token=n_token, n_layer=1, n_head=2, d_model=16,
                                           d_head=8, d_inner=32, tgt_len=8, mem_len=8),
                  seed).eval()
    ckpt = tmp_path / "model.pt"
    torch.save(m, ckpt)
    return ckpt


def build_cache(tmp_path, dataset, legacy, prepare):
    d = tmp_path / dataset
    d.mkdir()
    prepare(str(d))
    corpus = data_utils.get_lm_corpus(str(d), dataset, legacy_format=legacy)
    return d / "cache.pt", corpus


def read_vocab_lazily(cache, corpus):
    """Reads cache.pt's vocabulary; checks no byte of its tensors was read and the Python heap
    never held the encoded corpus."""
    before = torchfile.STORAGE_BYTES_READ[0]
    tracemalloc.start()
    try:
        vf = vocab_kinds.read_vocab(str(cache))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    corpus_bytes = sum(t.numel() * t.element_size() for t in (corpus.train, corpus.valid,
                                                              corpus.test))
    assert torchfile.STORAGE_BYTES_READ[0] == before, "the corpus tensors were read"
    assert corpus_bytes > 2_000_000 and peak < corpus_bytes / 8, (peak, corpus_bytes)
    return vf


@pytest.mark.parametrize("legacy", [False, True])
def test_authors_enwik8_cache_gives_byte_table(tmp_path, legacy):
    raw = austen_bytes(40)
    cache, corpus = build_cache(tmp_path, "enwik8", legacy,
                                lambda d: data_utils.prepare_enwik8(raw, d, 20000))
    # what their preparation + Vocab make of it: byte values by decreasing count, no newline
    want = [str(b) for b, _ in collections.Counter(b for b in raw if b != 10).most_common()]
    assert corpus.vocab.idx2sym == want  # the re-statement agrees with the rule
    vf = read_vocab_lazily(cache, corpus)
    assert vf.symbols == want and vf.meta["dataset"] == "enwik8"
    assert vocab_kinds.tokenizer_for(vf.symbols, vf.meta) == ("byte_table",
                                                              {"unknown": "refuse"})
    ckpt = authors_checkpoint(tmp_path, len(want))
    out = tmp_path / "out"
    before = torchfile.STORAGE_BYTES_READ[0]
    sources.convert_authors(str(ckpt), str(out), {}, str(cache))
    assert torchfile.STORAGE_BYTES_READ[0] - before <= os.path.getsize(ckpt)  # weights only
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["xlserve_tokenizer"] == "byte_table"
    assert cfg["xlserve_tokenizer_options"] == {"unknown": "refuse"}
    lines = (out / "vocab.txt").read_text().splitlines()
    assert lines == want and "10" not in lines and lines[0] == "32"
    # the user's fallback for bytes the table lacks
    out2 = tmp_path / "out2"
    r = convert("authors", ckpt, out2, "--vocab", cache, "--tokenizer-option", "unknown=drop")
    assert r.returncode == 0, r.stderr
    assert json.loads((out2 / "config.json").read_text())["xlserve_tokenizer_options"] == \
        {"unknown": "drop"}
    engine_info(out)


@pytest.mark.parametrize("legacy", [False, True])
def test_authors_text8_cache_gives_char_table(tmp_path, legacy):
    text = open(DATA, encoding="utf-8").read().lower()
    text = " ".join(re.sub(r"[^a-z]+", " ", text).split())
    text = " ".join([text] * 40)
    cache, corpus = build_cache(tmp_path, "text8", legacy,
                                lambda d: data_utils.prepare_text8(text, d, 20000))
    want = [("_" if c == " " else c) for c, _ in collections.Counter(text).most_common()]
    assert corpus.vocab.idx2sym == want
    vf = read_vocab_lazily(cache, corpus)
    assert vf.symbols == want and want[0] == "_"
    ckpt = authors_checkpoint(tmp_path, len(want))
    out = tmp_path / "out"
    r = convert("authors", ckpt, out, "--vocab", cache)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["xlserve_tokenizer"] == "char_table"
    assert cfg["xlserve_tokenizer_options"] == {"unknown": "refuse", "space_symbol": "_",
                                                "lower_case": True, "spell_digits": True}
    assert (out / "vocab.txt").read_text().splitlines() == want
    # an xlserve directory converted again keeps its tokenizer and options
    out3 = tmp_path / "again"
    r = convert("hf", out, out3)
    assert r.returncode == 0, r.stderr
    again = json.loads((out3 / "config.json").read_text())
    assert (again["xlserve_tokenizer"], again["xlserve_tokenizer_options"]) == \
        (cfg["xlserve_tokenizer"], cfg["xlserve_tokenizer_options"])
    r = convert("authors", ckpt, tmp_path / "o2", "--vocab", cache,
                "--tokenizer-option", "space_symbol=#")
    assert r.returncode == 2 and "space_symbol '#' is not in the table" in r.stderr, r.stderr
    engine_info(out)


def test_authors_word_caches(tmp_path):
    """wt103-style (special <eos>, case kept) -> words without options; lm1b-style (a vocab
    file with <S> and <UNK>, case kept) -> words naming those two; ptb-style (lowercased)."""
    lines = open(DATA, encoding="utf-8").read().splitlines()

    def prep(d, body=lines):
        # wt103 counts train only: the other splits' words all occur in train
        for name, part in (("train", body), ("valid", body[1::3]), ("test", body[2::3])):
            with open(os.path.join(d, name + ".txt"), "w", encoding="utf-8") as f:
                f.write("\n".join(part) + "\n")
    cache, corpus = build_cache(tmp_path, "wt103", False, prep)
    vf = vocab_kinds.read_vocab(str(cache))
    assert vf.symbols == corpus.vocab.idx2sym and vf.symbols[0] == "<eos>"
    assert vocab_kinds.tokenizer_for(vf.symbols, vf.meta) == ("words", {})

    def prep_lm1b(d):
        prep(d)
        words = sorted({w for line in lines for w in line.split()})
        with open(os.path.join(d, "1b_word_vocab.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(["<S>", "</S>", "<UNK>"] + [f"{w} 1" for w in words]) + "\n")
    cache, corpus = build_cache(tmp_path, "lm1b", True, prep_lm1b)
    vf = vocab_kinds.read_vocab(str(cache))
    assert vf.symbols[:3] == ["<S>", "</S>", "<UNK>"]
    assert vocab_kinds.tokenizer_for(vf.symbols, vf.meta) == \
        ("words", {"eos_token": "<S>", "unk_token": "<UNK>"})

    cache, corpus = build_cache(tmp_path, "ptb", False,
                                lambda d: prep(d, [ln.lower() for ln in lines]))
    vf = vocab_kinds.read_vocab(str(cache))
    assert vocab_kinds.tokenizer_for(vf.symbols, vf.meta) == ("words", {"lower_case": True})


def test_kind_rules_on_symbol_lists():
    """The rule on plain symbol lists (a vocab.txt): decimal byte values only -> byte_table
    (not with leading zeros or values over 255); single characters -> char_table; else words."""
    t = vocab_kinds.tokenizer_for
    assert t(["32", "101", "0", "255"], {"format": "text"})[0] == "byte_table"
    assert t(["32", "101", "256"], {"format": "text"})[0] == "words"
    assert t(["32", "010"], {"format": "text"})[0] == "words"
    k, o = t(["a", "B", " "], {"format": "text"})
    assert k == "char_table" and o["space_symbol"] == " " and o["lower_case"] is False
    assert t(["a", "bc"], {"format": "text"})[0] == "words"
    assert t(["32", "101"], {"format": "hf_tokenizer"})[0] == "transfo_xl"
    assert t(None, {}) == ("bytes", {})
    with pytest.raises(vocab_kinds.VocabError, match="byte_table needs"):
        vocab_kinds.choose(["a", "b"], {}, "byte_table")
    with pytest.raises(vocab_kinds.VocabError, match="256 symbols"):
        vocab_kinds.choose(["a", "b"], {}, "bytes")

"""The transfo_xl tokenizer (C, through `xlserve tokenize`) against the Python reference
(transfo_xl_ref.py) on the whole corpus (corpus_gen.py), cased and with lower_case.

The model directory is a small random model whose vocab.txt is <unk>, <eos>, <formula> and then
the tokens the reference produces on the corpus, less a seeded 8% left out so that <unk> is
exercised; its config.json names the transfo_xl tokenizer. For every line:
  encode: the C ids == the reference tokens mapped through vocab.txt (unknown -> <unk>)
  decode: `--decode` of those ids gives text == reference decode(the mapped tokens): Hugging
          Face's detokenize between <eos> tokens, each <eos> a newline (xlserve's choice), and
          its stream (the streaming detokenizer's pieces, concatenated) == text
plus decoding of seeded random id sequences (orders no sentence produces: quotes, CJK,
currency and contractions next to anything). Agreement is reported as lines equal / total.

CLI used: `xlserve tokenize --model DIR` reads text lines on stdin and prints one JSON object
per line, {"ids": [...], "pieces": [...]} or {"error": "..."}; with `--decode` each input line
is a JSON array of ids and the output {"text": "...", "stream": "..."}.
"""
import importlib.util
import json
import os
import random
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import corpus_gen  # noqa: E402
import transfo_xl_ref as ref  # noqa: E402
from tok_results import AGREEMENT  # noqa: E402
from xlmodel import model_dir  # noqa: E402

SPECIALS = ["<unk>", "<eos>", "<formula>"]
LEAVE_OUT = 0.08
SEED = 4242
SHOW = 12  # differing lines shown in a failure message


def _parity_generator():
    path = os.path.join(ROOT, "tests", "parity", "make_random_model.py")
    spec = importlib.util.spec_from_file_location("parity_make_random_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def xlserve():
    path = os.environ.get("XLSERVE_BIN")
    if not path:
        pytest.skip("XLSERVE_BIN is not set (run through ctest, or export it)")
    if not os.access(path, os.X_OK):
        pytest.fail(f"XLSERVE_BIN={path} is not an executable file")
    return path


@pytest.fixture(scope="module")
def corpus():
    lines = corpus_gen.lines()
    assert len(lines) >= 2000
    return lines


@pytest.fixture(scope="module")
def reference(corpus):
    """{lower_case: [tokens of each line]}"""
    return {lc: [ref.tokenize(text, lower_case=lc) for _, text in corpus] for lc in (False, True)}


@pytest.fixture(scope="module")
def vocab(reference):
    seen = set()
    for per_line in reference.values():
        for toks in per_line:
            seen.update(toks)
    words = sorted(seen - set(SPECIALS))
    rng = random.Random(SEED)
    rng.shuffle(words)
    keep = words[int(len(words) * LEAVE_OUT):]
    return SPECIALS + keep


def _write_model(out_dir, vocab, lower_case):
    gen = _parity_generator()
    spec = dict(vocab_size=len(vocab), cutoffs=[200, 2000], d_model=16, d_embed=16, n_head=2,
                d_head=8, d_inner=32, div_val=1, pre_lnorm=False, n_layer=1, mem_len=8,
                tgt_len=8, clamp_len=-1, same_length=False, untie_r=True,
                tie_word_embeddings=True, tie_projs=[False, False, False],
                layer_norm_epsilon=1e-5, _dtype="F32", _tied_storage="once")
    tensors, override = gen.stored_tensors(spec, SEED)
    model_dir.write_model_dir(out_dir, gen.public_config(spec), tensors, vocab=vocab,
                              dtype_override=override,
                              metadata={"generator": "tests/tokenizers"})
    cfg_path = os.path.join(out_dir, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["xlserve_tokenizer"] = "transfo_xl"
    cfg["xlserve_tokenizer_options"] = {
        "lower_case": lower_case, "delimiter": None, "never_split": SPECIALS,
        "eos_token": "<eos>", "unk_token": "<unk>"}
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


@pytest.fixture(scope="module")
def models(tmp_path_factory, vocab):
    root = tmp_path_factory.mktemp("transfo_xl_models")
    out = {}
    for lc in (False, True):
        d = str(root / ("lower" if lc else "cased"))
        _write_model(d, vocab, lc)
        out[lc] = d
    return out


def _run(xlserve, args, lines):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    r = subprocess.run([xlserve] + args, input=data, capture_output=True, timeout=600)
    assert r.returncode == 0, \
        f"xlserve {' '.join(args)} exited {r.returncode}: {r.stderr.decode(errors='replace')}"
    out = r.stdout.decode("utf-8").split("\n")
    if out and out[-1] == "":
        out.pop()
    assert len(out) == len(lines), \
        f"xlserve {' '.join(args)}: {len(out)} output lines for {len(lines)} input lines"
    return [json.loads(o) for o in out]


def _record(check, corpus_sources, equal_flags):
    total = len(equal_flags)
    eq = sum(equal_flags)
    AGREEMENT.append((check, "all", eq, total))
    if corpus_sources is not None:
        for src in sorted(set(corpus_sources)):
            flags = [e for s, e in zip(corpus_sources, equal_flags) if s == src]
            AGREEMENT.append((check, src, sum(flags), len(flags)))
    summary = f"{check}: {eq}/{total} lines equal"
    print(summary)
    return summary


VARIANTS = [pytest.param(False, id="cased"), pytest.param(True, id="lower_case")]


def _ids(tokens, tok2id):
    return [tok2id.get(t, 0) for t in tokens]


@pytest.mark.parametrize("lower_case", VARIANTS)
def test_encode_equals_reference(xlserve, corpus, reference, vocab, models, lower_case):
    tok2id = {t: i for i, t in enumerate(vocab)}
    want = [_ids(toks, tok2id) for toks in reference[lower_case]]
    got = _run(xlserve, ["tokenize", "--model", models[lower_case]], [t for _, t in corpus])
    flags = [g.get("ids") == w for g, w in zip(got, want)]
    name = "encode " + ("lower_case" if lower_case else "cased")
    summary = _record(name, [s for s, _ in corpus], flags)
    bad = [k for k, ok in enumerate(flags) if not ok]
    shown = "\n".join(
        f"  [{corpus[k][0]}] {corpus[k][1]!r}\n"
        f"    reference {reference[lower_case][k]} -> {want[k]}\n"
        f"    C         {got[k].get('pieces', got[k])} -> {got[k].get('ids')}"
        for k in bad[:SHOW])
    assert not bad, f"{summary}; first differences:\n{shown}"


@pytest.mark.parametrize("lower_case", VARIANTS)
def test_decode_equals_reference(xlserve, corpus, reference, vocab, models, lower_case):
    tok2id = {t: i for i, t in enumerate(vocab)}
    seqs = [_ids(toks, tok2id) for toks in reference[lower_case]]
    _compare_decode(xlserve, models[lower_case], vocab, seqs, [s for s, _ in corpus],
                    "decode " + ("lower_case" if lower_case else "cased"))


def test_decode_random_sequences(xlserve, vocab, models):
    """Token orders no sentence gives: half the draws come from the tokens the detokenizer
    treats specially (quotes, closing and opening punctuation, currency, contractions, CJK)."""
    rng = random.Random(SEED + 1)
    special = [i for i, t in enumerate(vocab)
               if t[0] in "'\"`\u201e\u201c,.?!:;%)]}([{$\u00bf\u00a1@-"
               or ref.is_cjk(t[0]) or ord(t[0]) in ref.CURRENCY]
    assert len(special) > 50
    seqs = []
    for _ in range(600):
        n = rng.randrange(0, 25)
        seqs.append([rng.choice(special) if rng.random() < 0.5 else rng.randrange(len(vocab))
                     for _ in range(n)])
    _compare_decode(xlserve, models[False], vocab, seqs, None, "decode random id sequences")


def _compare_decode(xlserve, model, vocab, seqs, sources, check):
    want = [ref.decode([vocab[i] for i in ids]) for ids in seqs]
    got = _run(xlserve, ["tokenize", "--model", model, "--decode"],
               [json.dumps(ids) for ids in seqs])
    text_ok = [g.get("text") == w for g, w in zip(got, want)]
    stream_ok = [g.get("stream") is not None and g.get("stream") == g.get("text") for g in got]
    s1 = _record(check + " (text)", sources, text_ok)
    s2 = _record(check + " (stream == text)", sources, stream_ok)
    bad = [k for k in range(len(seqs)) if not (text_ok[k] and stream_ok[k])]
    shown = "\n".join(
        f"  ids {seqs[k]} = {[vocab[i] for i in seqs[k]]}\n"
        f"    reference {want[k]!r}\n"
        f"    C         text {got[k].get('text')!r} stream {got[k].get('stream')!r}"
        + (f" error {got[k]['error']!r}" if "error" in got[k] else "")
        for k in bad[:SHOW])
    assert not bad, f"{s1}; {s2}; first differences:\n{shown}"


def test_vocab_and_corpus_cover_the_cases(corpus, reference, vocab):
    """The comparison means something only if the corpus has every kind of line, the vocab
    leaves some tokens out (so <unk> is produced) and the special tokens occur."""
    assert {s for s, _ in corpus} >= {"wikitext", "chat", "typed", "script", "punct", "unicode"}
    tok2id = {t: i for i, t in enumerate(vocab)}
    ids = [i for toks in reference[False] for i in _ids(toks, tok2id)]
    assert ids.count(0) > 100, "too few <unk>"
    assert ids.count(1) > 10 and ids.count(2) > 10, "too few <eos>/<formula>"
    assert len(vocab) == len(set(vocab)), "duplicate vocab symbols"
    assert all(t and not any(c.isspace() for c in t) for t in vocab), "a symbol with a space"

"""Which xlserve tokenizer a converted model gets, from what its vocabulary file holds.

The model directory names its tokenizer in config.json ("xlserve_tokenizer", with optional
"xlserve_tokenizer_options") and lists the symbols in vocab.txt (id order). This module reads a
vocabulary file and decides the kind and its options; the converters (sources.py, the TF
reader) call it, so every source gets the same rule.

  read_vocab(path)                      -> VocabFile(symbols, meta)
  tokenizer_for(symbols, source_meta)   -> (kind, options)      the automatic choice
  choose(symbols, meta, kind, options)  -> (kind, options)      with the user's overrides

source_meta (every key optional):
  format       "hf_tokenizer"  a Hugging Face TransfoXLTokenizer (its pickled __dict__ in
                               vocab.pkl / vocab.bin, or a vocab.txt in an HF directory)
               "authors"       the paper authors' Vocab (kimiyoung/transformer-xl
                               utils/vocabulary.py), e.g. from their cache.pt Corpus
               "text"          a plain symbol list (one per line)
  lower_case, delimiter, special, never_split, eos_token, unk_token,
  additional_special_tokens     as the tokenizer object held them
  dataset      the authors' Corpus.dataset ("wt103", "enwik8", "text8", "lm1b", ...)

Rules:
  hf_tokenizer                                      -> transfo_xl (Moses pipeline, options of
                                                       the tokenizer: lower_case, delimiter,
                                                       never_split, eos_token, unk_token)
  every symbol a decimal byte value "0".."255"      -> byte_table (authors' enwik8)
  every symbol one character                        -> char_table (authors' text8: a-z, "_")
  anything else                                     -> words (whitespace-split corpora: the
                                                       authors' wt103, ptb, lm1b)
"""
import json
import re

from xlconvert import torchfile

KINDS = ("bytes", "words", "transfo_xl", "byte_table", "char_table")

# option -> (check, description); what each kind accepts in xlserve_tokenizer_options
_BOOL = (lambda v: isinstance(v, bool), "true or false")
_STR = (lambda v: isinstance(v, str) and v != "", "a non-empty string")
_STR_OR_NULL = (lambda v: v is None or isinstance(v, str), "a string or null")
_STR_LIST = (lambda v: isinstance(v, list) and all(isinstance(x, str) and x for x in v),
             "a JSON list of non-empty strings")
_UNKNOWN = (lambda v: v in ("refuse", "drop"), "\"refuse\" or \"drop\"")
_CHAR = (lambda v: isinstance(v, str) and len(v) == 1, "one character")
OPTIONS = {
    "bytes": {},
    "words": {"lower_case": _BOOL, "eos_token": _STR, "unk_token": _STR},
    "transfo_xl": {"lower_case": _BOOL, "delimiter": _STR_OR_NULL, "never_split": _STR_LIST,
                   "eos_token": _STR, "unk_token": _STR},
    "byte_table": {"unknown": _UNKNOWN},
    "char_table": {"unknown": _UNKNOWN, "space_symbol": _CHAR, "lower_case": _BOOL,
                   "spell_digits": _BOOL},
}

HF_DEFAULT_ADDITIONAL = ["<formula>"]  # TransfoXLTokenizer's additional_special_tokens default


class VocabError(ValueError):
    pass


class VocabFile:
    """symbols: idx2sym (list of str); meta: source_meta (see the module doc)."""

    def __init__(self, symbols, meta):
        self.symbols, self.meta = symbols, meta


# ------------------------------------------------------------------------------------------
# Reading

def _dict_of(obj):
    if isinstance(obj, dict):
        return obj
    d = getattr(obj, "__dict__", None)
    return d if isinstance(d, dict) else None


def _token_str(v):
    """A special token as a tokenizer pickles it: a str, or an AddedToken (content=...)."""
    if isinstance(v, str):
        return v
    d = _dict_of(v)
    if d is not None:
        for k in ("content", "_content"):
            if isinstance(d.get(k), str):
                return d[k]
        st = d.get("_state")
        if isinstance(st, dict) and isinstance(st.get("content"), str):
            return st["content"]
    return None


def _symbols_of(d, where):
    if isinstance(d.get("idx2sym"), list):
        syms = [s.decode("utf-8") if isinstance(s, bytes) else s for s in d["idx2sym"]]
    else:
        s2i = d.get("sym2idx")
        if not isinstance(s2i, dict) or not s2i:
            return None
        items = sorted(s2i.items(), key=lambda kv: kv[1])
        if [i for _, i in items] != list(range(len(items))):
            raise VocabError(f"{where}: sym2idx ids are not 0..n-1")
        syms = [k for k, _ in items]
    return syms


def hf_tokenizer_meta(d):
    """source_meta from a TransfoXLTokenizer's __dict__ (or tokenizer_config.json)."""
    meta = {"format": "hf_tokenizer"}
    for k in ("lower_case", "delimiter"):
        if k in d and (d[k] is None or isinstance(d[k], (bool, str))):
            meta[k] = d[k]
    maps = [d]
    for k in ("_special_tokens_map", "special_tokens_map", "init_kwargs"):
        if isinstance(d.get(k), dict):
            maps.append(d[k])
    for name in ("eos_token", "unk_token"):
        for m in maps:
            v = _token_str(m.get(name, m.get("_" + name)))
            if v:
                meta[name] = v
                break
    for m in maps:
        v = m.get("additional_special_tokens", m.get("_additional_special_tokens"))
        if isinstance(v, list):
            meta["additional_special_tokens"] = [t for t in map(_token_str, v) if t]
            break
    if isinstance(d.get("never_split"), (list, tuple)):
        meta["never_split"] = [t for t in map(_token_str, d["never_split"]) if t]
    if isinstance(d.get("special"), list):
        meta["special"] = [t for t in map(_token_str, d["special"]) if t]
    return meta


def _authors_meta(vocab_d, corpus_d):
    meta = {"format": "authors"}
    for k in ("lower_case", "delimiter"):
        if k in vocab_d and (vocab_d[k] is None or isinstance(vocab_d[k], (bool, str))):
            meta[k] = vocab_d[k]
    if isinstance(vocab_d.get("special"), list):
        meta["special"] = [s for s in vocab_d["special"] if isinstance(s, str)]
    if corpus_d is not None and isinstance(corpus_d.get("dataset"), str):
        meta["dataset"] = corpus_d["dataset"]
    return meta


def read_vocab(path, vocab_size=None, text_format="text"):
    """Reads a vocabulary file: vocab.txt (one symbol per line; text_format says whose),
    an HF vocab.pkl (pickled TransfoXLTokenizer __dict__) or vocab.bin (torch.save of it), or
    the authors' cache.pt (a pickled Corpus whose .vocab is their Vocab; the encoded corpus in
    it is never read: the file is loaded lazily). Pickles are read without executing them."""
    if path.endswith(".txt"):
        try:
            with open(path, encoding="utf-8") as f:
                syms = [line.rstrip("\n") for line in f]
        except (OSError, UnicodeDecodeError) as e:
            raise VocabError(f"{path}: cannot read ({e})") from None
        meta = {"format": text_format}
    else:
        try:
            obj = torchfile.load(path, lazy=True).obj
        except torchfile.TorchFileError as e:
            raise VocabError(str(e)) from None
        syms, meta = _from_object(obj, path)
    bad = [s for s in syms if not isinstance(s, str) or "\n" in s or "\r" in s or s == ""]
    if bad:
        raise VocabError(f"{path}: {len(bad)} symbols are not non-empty single-line strings "
                         f"(first: {bad[0]!r})")
    if len(set(syms)) != len(syms):
        seen, dup = set(), None
        for s in syms:
            if s in seen:
                dup = s
                break
            seen.add(s)
        raise VocabError(f"{path}: the symbol {dup!r} appears twice")
    if vocab_size is not None and len(syms) != vocab_size:
        raise VocabError(f"{path}: {len(syms)} symbols, the model has {vocab_size}")
    return VocabFile(syms, meta)


def _from_object(obj, path):
    d = _dict_of(obj)
    if d is None:
        raise VocabError(f"{path}: holds a {type(obj).__name__}, not a vocabulary")
    name = getattr(obj, "_name", "") if isinstance(obj, torchfile.Opaque) else ""
    syms = _symbols_of(d, path)
    if syms is not None:
        if isinstance(obj, dict) or "TransfoXLTokenizer" in name:
            return syms, hf_tokenizer_meta(d)  # the tokenizer __dict__ HF saves
        return syms, _authors_meta(d, None)  # a pickled Vocab object
    for key in ("vocab", "tokenizer"):
        inner = _dict_of(d.get(key))
        if inner is None:
            continue
        syms = _symbols_of(inner, path)
        if syms is not None:
            if "TransfoXLTokenizer" in getattr(d.get(key), "_name", ""):
                return syms, hf_tokenizer_meta(inner)
            return syms, _authors_meta(inner, d)  # the authors' Corpus (cache.pt)
    raise VocabError(f"{path}: no idx2sym / sym2idx vocabulary found in it (neither a "
                     "tokenizer dict, a Vocab, nor a Corpus with .vocab)")


# ------------------------------------------------------------------------------------------
# Choosing

_BYTE_SYM = re.compile(r"(0|[1-9][0-9]{0,2})\Z")


def is_byte_table(symbols):
    return bool(symbols) and all(_BYTE_SYM.match(s) and int(s) <= 255 for s in symbols)


def is_char_table(symbols):
    return bool(symbols) and all(len(s) == 1 for s in symbols)


def _hf_never_split(meta):
    if meta.get("never_split"):
        out = list(meta["never_split"])
    else:  # TransfoXLTokenizer: never_split defaults to all_special_tokens
        out = [meta.get("eos_token", "<eos>"), meta.get("unk_token", "<unk>")]
        out += meta.get("additional_special_tokens", HF_DEFAULT_ADDITIONAL)
    out += meta.get("special", [])
    return list(dict.fromkeys(t for t in out if t))


def default_options(kind, symbols, meta):
    """The options of KIND for this vocabulary (before the user's overrides)."""
    meta = meta or {}
    if kind == "transfo_xl":
        return {"lower_case": bool(meta.get("lower_case", False)),
                "delimiter": meta.get("delimiter"),
                "never_split": _hf_never_split(meta),
                "eos_token": meta.get("eos_token", "<eos>"),
                "unk_token": meta.get("unk_token", "<unk>")}
    if kind == "byte_table":
        return {"unknown": "refuse"}
    if kind == "char_table":
        opts = {"unknown": "refuse"}
        if "_" in symbols and " " not in symbols:
            opts["space_symbol"] = "_"
        elif " " in symbols:
            opts["space_symbol"] = " "
        has_upper = any(s != s.lower() for s in symbols)
        opts["lower_case"] = bool(meta.get("lower_case", not has_upper)) and not has_upper
        # text8's preprocessing spelled digits out; its table has none
        opts["spell_digits"] = meta.get("dataset") == "text8" and \
            not any(s.isdigit() for s in symbols)
        return opts
    if kind == "words":
        opts = {}
        if meta.get("lower_case") and not any(s != s.lower() for s in symbols
                                              if not s.startswith("<")):
            opts["lower_case"] = True
        sset = set(symbols)
        if "<eos>" not in sset:
            eos = next((t for t in ("<S>", "</s>", "<EOS>") if t in sset), None)
            if eos:
                opts["eos_token"] = eos
        if "<unk>" not in sset and "<UNK>" in sset:
            opts["unk_token"] = "<UNK>"
        return opts
    return {}


def tokenizer_for(symbols, source_meta=None):
    """(kind, options) for a model whose vocabulary is SYMBOLS (idx2sym), read from a file
    described by SOURCE_META (see the module doc). symbols None: a byte model (id = byte)."""
    meta = source_meta or {}
    if symbols is None:
        return "bytes", {}
    if meta.get("format") == "hf_tokenizer":
        kind = "transfo_xl"
    elif is_byte_table(symbols):
        kind = "byte_table"
    elif is_char_table(symbols):
        kind = "char_table"
    else:
        kind = "words"
    return kind, default_options(kind, symbols, meta)


def parse_option(text):
    """'key=value' of --tokenizer-option: value is JSON when it parses (true, null, 3,
    ["<eos>"]), else the plain string."""
    if "=" not in text:
        raise VocabError(f"--tokenizer-option {text!r}: expected KEY=VALUE")
    key, raw = text.split("=", 1)
    key = key.strip().replace("-", "_")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key, value


def choose(symbols, meta, kind=None, user_options=None, where="vocabulary"):
    """The automatic choice, or the user's KIND, with the user's options on top; checks that
    the kind can spell this vocabulary and that every option is known and well typed."""
    auto_kind, opts = tokenizer_for(symbols, meta)
    if kind is not None and kind != auto_kind:
        if kind not in KINDS:
            raise VocabError(f"unknown tokenizer kind {kind!r} (one of: {', '.join(KINDS)})")
        if kind == "bytes":
            if symbols is not None and len(symbols) != 256:
                raise VocabError(f"{where}: the bytes tokenizer needs 256 symbols (id = byte "
                                 f"value), the vocabulary has {len(symbols)}")
        elif symbols is None:
            raise VocabError(f"tokenizer {kind} needs a vocabulary file (--vocab)")
        elif kind == "byte_table" and not is_byte_table(symbols):
            bad = next(s for s in symbols if not (_BYTE_SYM.match(s) and int(s) <= 255))
            raise VocabError(f"{where}: byte_table needs every symbol to be a byte value "
                             f"written in decimal (0..255); {bad!r} is not")
        elif kind == "char_table" and not is_char_table(symbols):
            bad = next(s for s in symbols if len(s) != 1)
            raise VocabError(f"{where}: char_table needs every symbol to be one character; "
                             f"{bad!r} is not")
        opts = default_options(kind, symbols or [], meta)
    else:
        kind = auto_kind
    allowed = OPTIONS[kind]
    for key, value in (user_options or {}).items():
        if key not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise VocabError(f"--tokenizer-option {key}: not an option of the {kind} tokenizer "
                             f"(its options: {known})")
        check, what = allowed[key]
        if not check(value):
            raise VocabError(f"--tokenizer-option {key}={json.dumps(value)}: must be {what}")
        opts[key] = value
    if kind == "char_table" and "space_symbol" in opts and opts["space_symbol"] not in symbols:
        raise VocabError(f"{where}: space_symbol {opts['space_symbol']!r} is not in the table")
    return kind, opts

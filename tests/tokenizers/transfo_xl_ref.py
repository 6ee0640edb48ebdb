"""transfo_xl_ref.py: the test-side reference of Hugging Face's TransfoXLTokenizer as wt103 uses it.

Owns: a pure-Python statement of the rules (used only by the tests, never by xlserve) that
the C tokenizer is compared against, written from the published Moses rules as sacremoses
applies them (MosesPunctNormalizer("en") with its defaults, MosesTokenizer("en").tokenize with
aggressive_dash_splits=True, escape=False, protected_patterns=never_split, the English
non-breaking prefixes, MosesDetokenizer("en").detokenize) and from the steps
TransfoXLTokenizer adds around them.

    tokenize(line, lower_case=False, never_split=NEVER_SPLIT) -> list of str
    detokenize(tokens) -> str

The pipeline, in order (each step is a function below):
  1. lower_case only: every character outside an occurrence of a never_split token is
     lowercased on its own (str.lower() of one character: the full Unicode mapping, so
     U+0130 becomes "i" + U+0307, but no final-sigma context), as the base tokenizer's
     do_lower_case regex does.
  2. The line is cut around exact (case-sensitive) occurrences of the never_split tokens,
     which become tokens as they are; each piece in between goes through steps 3-6.
  3. str.strip() (Python whitespace, see WHITESPACE below), and str.lower() again with
     lower_case (a no-op after step 1).
  4. Moses punctuation normalisation (normalize_punctuation).
  5. The Moses English tokenizer (moses_tokenize), never_split as protected patterns:
     matched case-insensitively as Python's re does (so "<EOS>" stays whole even though step
     2 left it alone; re also lets U+212A KELVIN SIGN match "k" and U+017F LONG S match "s").
  6. Number splitting: in each token, a "," or "." between two decimal digits (Unicode Nd)
     becomes " @,@ " / " @.@ " and the token is split again.
Decoding: the Moses English detokenizer (which turns " @-@ " back into "-"), then
" @,@ " -> "," and " @.@ " -> "." (plain left-to-right replacement), then str.strip().

Character classes. The project's definition is sacremoses' perluniprops data (files exported
from Perl: an old Unicode, mostly the Basic Multilingual Plane, without CJK ideographs and
Hangul syllables), which is what Hugging Face's tokenizer runs with. Python's re has no
\\p{...}, so this file reads those sets as data from the generated table
core/tok_unicode_tables.c (tools/gen_unicode_tables.py --perluniprops writes it from
sacremoses' files); the rules that use them are written here independently of the C, and
test_transfo_xl_ref_vs_sacremoses.py (run by hand) checks the sets and the rules against
sacremoses' own code:
  ALPHA (IsAlpha, the detokenizer's), NUM (IsN), CURRENCY (IsSc), LOWER (IsLower: the
      "next word starts in lowercase" test, sacremoses' islower of its first character).
  ALPHA_TOK / ALNUM_TOK: the tokenizer's IsAlpha / IsAlnum, the data plus the Indic viramas
      and nuktas sacremoses appends to both (INDIC_SIGNS).
  CJK (the detokenizer's is_cjk): the fixed code-point ranges in CJK_RANGES, both ends
      included as in sacremoses 0.0.x (0.1.x tests them with both ends excluded, so that
      e.g. U+AC00 HANGUL SYLLABLE GA and U+A840 are not CJK there).
  WHITESPACE: str.isspace() (Python's \\s and str.split()/strip()): \\t \\n \\v \\f \\r,
      U+001C-001F, space, U+0085, U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F,
      U+205F, U+3000. (Not U+200B, U+180E, U+FEFF.)
  DIGIT (\\d in the normaliser and the number splitter): category Nd, every plane.
Measured against sacremoses (the corpus, encode cased and lower_case, decode cased): 0.0.45
5176/5176 equal; 0.1.1 5170/5176 (6 decodes next to a character at an end of a CJK range).

Other choices, all as sacremoses does them: the protected-pattern placeholder is
"THISISPROTECTED" + a 3-digit index (it takes part in the rules: it is alphanumeric and
ends in digits), never_split entries are matched literally (sacremoses compiles them as
regexes; the defaults hold no metacharacter), the XML unescaping of the detokenizer runs
(escape=False only concerns the tokenizer).
"""
import os
import re
import unicodedata

UNICODE_VERSION = unicodedata.unidata_version

NEVER_SPLIT = ("<unk>", "<eos>", "<formula>")

# --------------------------------------------------------------------------------------------
# Character classes

# The class data: sacremoses' perluniprops files (IsAlpha, IsAlnum, IsN, IsSc, IsLower), the
# sets Hugging Face's tokenizer runs with, as the generated table core/tok_unicode_tables.c
# holds them (tools/gen_unicode_tables.py --perluniprops; one {first, last, flags} entry per run
# of code points, flags: 1 IsAlpha, 2 IsN, 8 IsSc, 32 IsLower, 128 IsAlnum). Only the data is
# shared with the C: the rules below are this file's own. test_transfo_xl_ref_vs_sacremoses.py
# checks these sets against sacremoses' own.
_TABLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "core", "tok_unicode_tables.c")
_F_ALPHA, _F_N, _F_SC, _F_LOWER, _F_ALNUM = 1, 2, 8, 32, 128


def _read_table(path=_TABLE):
    with open(path, encoding="utf-8") as f:
        src = f.read()
    body = src[src.index("xl_uclass_ranges[] = {"):]
    body = body[:body.index("};")]
    sets = {k: set() for k in (_F_ALPHA, _F_N, _F_SC, _F_LOWER, _F_ALNUM)}
    for first, last, flags in re.findall(r"\{0x([0-9A-F]+),0x([0-9A-F]+),(\d+)\}", body):
        for bit, members in sets.items():
            if int(flags) & bit:
                members.update(range(int(first, 16), int(last, 16) + 1))
    return {k: frozenset(v) for k, v in sets.items()}


_SETS = _read_table()

# The viramas and nuktas sacremoses adds to the tokenizer's IsAlpha/IsAlnum (Devanagari,
# Bengali, Gurmukhi, Gujarati, Oriya, Tamil, Telugu, Kannada, Malayalam, Sinhala, Lao, Myanmar,
# Tagalog, Sundanese, Lepcha, Saurashtra, Rejang, Meetei Mayek, and above U+FFFF Kharoshthi,
# Brahmi, Kaithi, Chakma, Mahajani, Sharada, Khojki, Khudawadi, Grantha, Newa, Tirhuta,
# Siddham, Modi, Takri, Dogra, Nandinagari, Zanabazar Square, Bhaiksuki, Masaram and Gunjala
# Gondi, Adlam).
INDIC_SIGNS = (
    0x094D, 0x09CD, 0x0A4D, 0x0ACD, 0x0B4D, 0x0BCD, 0x0C4D, 0x0CCD, 0x0D3B, 0x0D3C, 0x0D4D,
    0x0EBA, 0x1039, 0x1714, 0x1BAB, 0xA8C4, 0xA8F3, 0xA8F4, 0xA953, 0xAAF6, 0x0DCA,
    0x093C, 0x09BC, 0x0A3C, 0x0ABC, 0x0AFD, 0x0AFE, 0x0AFF, 0x0B3C, 0x0CBC, 0x1C37,
    0x10A3F, 0x11046, 0x110B9, 0x11133, 0x111C0, 0x11235, 0x112EA, 0x1134D, 0x11442, 0x114C2,
    0x115BF, 0x1163F, 0x116B6, 0x11839, 0x119E0, 0x11A34, 0x11C3F, 0x11D45, 0x11D97,
    0x110BA, 0x11173, 0x111CA, 0x11236, 0x112E9, 0x1133C, 0x11446, 0x114C3, 0x115C0,
    0x116B7, 0x1183A, 0x11D42, 0x1E94A)
# sacremoses.util.is_cjk's ranges (inclusive)
CJK_RANGES = ((0x1100, 0x11FF), (0x2E80, 0xA4CF), (0xA840, 0xA87F), (0xAC00, 0xD7AF),
              (0xF900, 0xFAFF), (0xFE30, 0xFE4F), (0xFF65, 0xFFDC), (0x17000, 0x18AFF),
              (0x1B000, 0x1B12F), (0x1B170, 0x1B2FF), (0x20000, 0x2FFFF))


def _inside(cp, blocks):
    return any(lo <= cp <= hi for lo, hi in blocks)


ALPHA = _SETS[_F_ALPHA]
ALPHA_TOK = ALPHA | frozenset(INDIC_SIGNS)
ALNUM_TOK = _SETS[_F_ALNUM] | frozenset(INDIC_SIGNS)
NUM = _SETS[_F_N]
CURRENCY = _SETS[_F_SC]
LOWER = _SETS[_F_LOWER]


def is_lower(ch):
    return ord(ch) in LOWER


def is_cjk(ch):
    return _inside(ord(ch), CJK_RANGES)


def _class_body(codepoints):
    """A regex character-class body (no brackets) holding exactly these code points."""
    cps = sorted(codepoints)
    parts, i = [], 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        lo, hi = cps[i], cps[j]
        parts.append(_esc(lo) if lo == hi else _esc(lo) + "-" + _esc(hi))
        i = j + 1
    return "".join(parts)


def _esc(cp):
    return "\\U%08X" % cp


_ALNUM_C = _class_body(ALNUM_TOK)
_ALPHA_C = _class_body(ALPHA_TOK)
_NUM_C = _class_body(NUM)

# --------------------------------------------------------------------------------------------
# Moses punctuation normalisation (normalize-punctuation.perl as sacremoses ports it, language
# "en", Penn quotes on, quote/comma and number normalisation on, no pre/post Unicode passes)

_NORMALIZE = [(re.compile(p), r) for p, r in (
    # extra whitespace
    (r"\r", ""),
    (r"\(", " ("),
    (r"\)", ") "),
    (r" +", " "),
    (r"\) ([.!:?;,])", r")\1"),
    (r"\( ", "("),
    (r" \)", ")"),
    (r"(\d) %", r"\1%"),
    (r" :", ":"),
    (r" ;", ";"),
    # backquotes and doubled single quotes
    (r"`", "'"),
    (r"''", ' " '),
    # Unicode quotes, dashes, ellipsis
    ("\u201e", '"'),
    ("\u201c", '"'),
    ("\u201d", '"'),
    ("\u2013", "-"),
    ("\u2014", " - "),
    (r" +", " "),
    ("\u00b4", "'"),
    ("([a-zA-Z])\u2018([a-zA-Z])", r"\1'\2"),
    ("([a-zA-Z])\u2019([a-zA-Z])", r"\1'\2"),
    ("\u2018", "'"),
    ("\u201a", "'"),
    ("\u2019", "'"),
    (r"''", '"'),
    ("\u00b4\u00b4", '"'),
    ("\u2026", "..."),
    # French quotes
    ("\u00a0\u00ab\u00a0", '"'),
    ("\u00ab\u00a0", '"'),
    ("\u00ab", '"'),
    ("\u00a0\u00bb\u00a0", '"'),
    ("\u00a0\u00bb", '"'),
    ("\u00bb", '"'),
    # no-break spaces before punctuation and units
    ("\u00a0%", "%"),
    ("n\u00ba\u00a0", "n\u00ba "),
    ("\u00a0:", ":"),
    ("\u00a0\u00baC", " \u00baC"),
    ("\u00a0cm", " cm"),
    ("\u00a0\\?", "?"),
    ("\u00a0!", "!"),
    ("\u00a0;", ";"),
    (",\u00a0", ", "),
    (r" +", " "),
    # English: quote before comma/period
    (r'"([,.]+)', r'\1"'),
    # digits grouped with a no-break space
    ("(\\d)\u00a0(\\d)", r"\1.\2"),
)]


def normalize_punctuation(text):
    for pat, rep in _NORMALIZE:
        text = pat.sub(rep, text)
    return text.strip()

# --------------------------------------------------------------------------------------------
# Moses English tokenizer (tokenizer.perl as sacremoses' MosesTokenizer.tokenize runs it)


def _load_prefixes():
    """English non-breaking prefixes (Moses nonbreaking_prefix.en): (plain, numeric_only)."""
    plain = [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    plain += ("Adj Adm Adv Asst Bart Bldg Brig Bros Capt Cmdr Col Comdr Con Corp Cpl DR Dr Drs "
              "Ens Gen Gov Hon Hr Hosp Insp Lt MM MR MRS MS Maj Messrs Mlle Mme Mr Mrs Ms Msgr "
              "Op Ord Pfc Ph Prof Pvt Rep Reps Res Rev Rt Sen Sens Sfc Sgt Sr St Supt Surg "
              "v vs i.e rev e.g Rs Nos Nr Jan Feb Mar Apr Jun Jul Aug Sep Oct Nov Dec").split()
    numeric_only = ["No", "Art", "pp"]  # listed as "No #NUMERIC_ONLY#" etc.
    return frozenset(plain), frozenset(numeric_only)


NONBREAKING_PREFIXES, NUMERIC_ONLY_PREFIXES = _load_prefixes()

_WS_RUN = re.compile(r"\s+")
_CONTROL = re.compile("[\x00-\x1f]")
_PAD_OTHER = re.compile(r"([^%s\s.'`,\-])" % _ALNUM_C)
_DASH_SPLIT = re.compile(r"([%s])-(?=[%s])" % (_ALNUM_C, _ALNUM_C))
_COMMA_RULES = [
    (re.compile(r"([^%s]),"% _NUM_C), r"\1 , "),
    (re.compile(r",([^%s])" % _NUM_C), r" , \1"),
    (re.compile(r"([%s]),$" % _NUM_C), r"\1 , "),
]
_APOSTROPHE_RULES = [
    (re.compile(r"([^{a}])'([^{a}])".format(a=_ALPHA_C)), r"\1 ' \2"),
    (re.compile(r"([^{a}{n}])'([{a}])".format(a=_ALPHA_C, n=_NUM_C)), r"\1 ' \2"),
    (re.compile(r"([{a}])'([^{a}])".format(a=_ALPHA_C)), r"\1 ' \2"),
    (re.compile(r"([{a}])'([{a}])".format(a=_ALPHA_C)), r"\1 '\2"),
    (re.compile(r"([{n}])'(s)".format(n=_NUM_C)), r"\1 '\2"),
]
_TRAILING_DOT_QUOTE = re.compile(r"\.' ?$")
_PLACEHOLDER = "THISISPROTECTED%03d"


def _protect_dots(text):
    """Runs of two or more dots become DOTMULTI words so the period rules leave them alone."""
    text = re.sub(r"\.(\.+)", r" DOTMULTI\1", text)
    while "DOTMULTI." in text:
        text = re.sub(r"DOTMULTI\.([^.])", r"DOTDOTMULTI \1", text)
        text = text.replace("DOTMULTI.", "DOTDOTMULTI")
    return text


def _restore_dots(text):
    while "DOTDOTMULTI" in text:
        text = text.replace("DOTDOTMULTI", "DOTMULTI.")
    return text.replace("DOTMULTI", ".")


def _split_final_periods(text):
    """A word ending in "." loses it unless it is an abbreviation by the prefix rules."""
    words = text.split()
    for i, word in enumerate(words):
        if len(word) < 2 or not word.endswith("."):
            continue
        stem = word[:-1]
        nxt = words[i + 1] if i + 1 < len(words) else None
        if ("." in stem and any(ord(c) in ALPHA_TOK for c in stem)) \
                or stem in NONBREAKING_PREFIXES \
                or (nxt is not None and is_lower(nxt[0])):
            continue
        if stem in NUMERIC_ONLY_PREFIXES and nxt is not None and re.match(r"[0-9]", nxt):
            continue
        words[i] = stem + " ."
    return " ".join(words)


def moses_tokenize(text, protected=NEVER_SPLIT):
    text = _WS_RUN.sub(" ", text)
    text = _CONTROL.sub("", text)
    found = []
    for tok in protected:
        found += [m.group() for m in re.finditer(re.escape(tok), text, re.IGNORECASE)]
    for i, tok in enumerate(found):
        text = text.replace(tok, _PLACEHOLDER % i)
    text = text.strip()
    text = _PAD_OTHER.sub(r" \1 ", text)
    text = _DASH_SPLIT.sub(r"\1 @-@ ", text)
    text = _protect_dots(text)
    for pat, rep in _COMMA_RULES:
        text = pat.sub(rep, text)
    for pat, rep in _APOSTROPHE_RULES:
        text = pat.sub(rep, text)
    text = _split_final_periods(text)
    text = _WS_RUN.sub(" ", text).strip()
    text = _TRAILING_DOT_QUOTE.sub(" . ' ", text)
    for i, tok in enumerate(found):
        text = text.replace(_PLACEHOLDER % i, tok)
    text = _restore_dots(text)
    return text.split()

# --------------------------------------------------------------------------------------------
# TransfoXLTokenizer around the Moses steps

_NUMBER_SEP = re.compile(r"(?<=\d)[,.](?=\d)")


def split_numbers(tokens):
    out = []
    for tok in tokens:
        out += _NUMBER_SEP.sub(lambda m: " @" + m.group() + "@ ", tok).split()
    return out


def _specials_regex(never_split):
    alts = sorted(set(never_split), key=len, reverse=True)  # longest first, like a trie
    return re.compile("(" + "|".join(re.escape(t) for t in alts) + ")") if alts else None


def _lower_outside(text, special_re):
    if special_re is None:
        return "".join(c.lower() for c in text)
    out, pos = [], 0
    for m in special_re.finditer(text):
        out.append("".join(c.lower() for c in text[pos:m.start()]))
        out.append(m.group())
        pos = m.end()
    out.append("".join(c.lower() for c in text[pos:]))
    return "".join(out)


def tokenize(line, lower_case=False, never_split=NEVER_SPLIT):
    """The tokens Hugging Face's TransfoXLTokenizer.tokenize gives for one line (no newline)."""
    special_re = _specials_regex(never_split)
    if lower_case:
        line = _lower_outside(line, special_re)
    pieces = special_re.split(line) if special_re is not None else [line]
    tokens = []
    for k, piece in enumerate(pieces):
        if k % 2 == 1:  # a never_split token (split() puts captures at odd places)
            tokens.append(piece)
            continue
        piece = piece.strip()
        if lower_case:
            piece = piece.lower()
        if not piece:
            continue
        text = normalize_punctuation(piece)
        tokens += split_numbers(moses_tokenize(text, never_split))
    return tokens

# --------------------------------------------------------------------------------------------
# Decoding: Moses English detokenizer, then the number separators

_UNESCAPE = (("&bar;", "|"), ("&#124;", "|"), ("&lt;", "<"), ("&gt;", ">"), ("&bra;", "["),
             ("&ket;", "]"), ("&quot;", '"'), ("&apos;", "'"), ("&#91;", "["), ("&#93;", "]"),
             ("&amp;", "&"))
_OPENERS = frozenset("([{\u00bf\u00a1")
_CLOSERS = frozenset(",.?!:;\\%}])")
_QUOTES = frozenset("'\"\u201e\u201c`")


def moses_detokenize(tokens):
    text = " " + " ".join(tokens) + " "
    text = text.replace(" @-@ ", "-")
    for esc, ch in _UNESCAPE:
        text = text.replace(esc, ch)
    words = text.split()
    quotes = {"'": 0, '"': 0, "``": 0, "`": 0, "''": 0}
    out, gap = "", " "
    for i, w in enumerate(words):
        if is_cjk(w[0]):
            out += w if i > 0 and is_cjk(words[i - 1][-1]) else gap + w
            gap = " "
        elif all(ord(c) in CURRENCY or c in _OPENERS for c in w):
            out += gap + w
            gap = ""
        elif all(c in _CLOSERS for c in w):
            out += w
            gap = " "
        elif i > 0 and len(w) > 1 and w[0] == "'" and ord(w[1]) in ALPHA:
            out += w  # English contraction: 's, 're, 't ...
            gap = " "
        elif all(c in _QUOTES for c in w):
            kind = '"' if all(c in "\u201e\u201c\u201d" for c in w) else w
            quotes.setdefault(kind, 0)
            if quotes[kind] % 2 == 0:
                if w == "'" and i > 0 and words[i - 1].endswith("s"):
                    out += w  # possessive after s: "the Jones' house"
                    gap = " "
                else:
                    out += gap + w  # opening quote: attaches to what follows
                    gap = ""
                    quotes[kind] += 1
            else:
                out += w  # closing quote: attaches to what precedes
                gap = " "
                quotes[kind] += 1
        else:
            out += gap + w
            gap = " "
    return re.sub(" {2,}", " ", out).strip()


def detokenize(tokens):
    """The text Hugging Face's TransfoXLTokenizer.convert_tokens_to_string gives."""
    text = moses_detokenize(tokens)
    text = text.replace(" @,@ ", ",").replace(" @.@ ", ".")
    return text.strip()


def decode(tokens, eos_token="<eos>"):
    """What xlserve's transfo_xl decoder gives: the tokens are cut at each eos_token, every
    piece is decoded as Hugging Face does (detokenize), and the pieces are joined with newlines.
    (xlserve's choice, the inverse of its encoder turning each newline into <eos>; Hugging Face
    keeps "<eos>" as a word.)"""
    pieces, cur = [], []
    for tok in tokens:
        if tok == eos_token:
            pieces.append(cur)
            cur = []
        else:
            cur.append(tok)
    pieces.append(cur)
    return "\n".join(detokenize(p) for p in pieces)

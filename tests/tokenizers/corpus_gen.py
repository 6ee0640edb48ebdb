"""corpus_gen.py: the tokenizer comparison corpus, the same on every run (fixed seed).

Owns: the list of test lines, one text per line (never a "\\n" inside one, never NUL, never a
surrogate or an unassigned code point: their classes depend on the Unicode version a table was
made from), each tagged with where it comes from:
  wikitext  corpus/wikitext.txt: WikiText-103-style lines (" = Title = ", " @-@ ", <unk>)
  chat      corpus/chat.txt: sentences as people type them
  austen    tests/tools/data/austen-test-excerpt.txt: real prose (non-empty lines)
  typed     made here from parts: contractions, numbers with separators, decimals,
            percentages, currency, URLs, emails, dashes, ellipses, quotes, emoji, whitespace
  script    words in every script the Moses rules mention (the CJK ranges of the
            detokenizer, the Indic scripts whose viramas and nuktas the tokenizer adds) and
            the other major ones, mixed with Latin punctuation
  punct     random strings over the characters the rules look at
  unicode   random code points drawn from every general category but Cn, Cs

Usage: corpus_gen.py [--seed S]   prints the lines (tab-separated: source, text as JSON).
"""
import argparse
import json
import os
import random
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SEED = 20251202


def _read_lines(path):
    with open(path, encoding="utf-8", newline="") as f:
        return [ln for ln in f.read().split("\n") if ln != ""]


# --- typed: sentences assembled from parts ----------------------------------------------------

WORDS = ("the cat dog house car idea people time year day way man woman child world life hand "
         "part place case week company system program question work government number night "
         "point home water room mother area money story fact month lot right study book eye "
         "job word business issue side kind head friend hour game line end member law city "
         "really very just also well even still never always maybe quite pretty").split()
VERBS = ("is was goes went likes liked wants wanted needs made makes said says thinks thought "
         "looks looked seems seemed gives gave finds found tells told feels felt").split()
NAMES = ("John Mary O'Neil D'Angelo McDonald Zoë José François Björn Łukasz Jürgen Siobhán "
         "Nguyễn Müller O'Brien-Smith Anne-Marie").split()
CONTRACTIONS = ("don't can't won't isn't aren't wasn't weren't I'm you're he's she's it's we're "
                "they're I've you've we've they've I'd you'd he'd I'll you'll she'll we'll "
                "they'll let's that's who's what's where's how's there's y'all ma'am o'clock "
                "ain't shan't needn't mustn't could've should've would've DON'T CAN'T I'M "
                "it’s don’t I’m").split()
ABBREVS = ("Mr. Mrs. Ms. Dr. Prof. St. Jr. Sr. Inc. Ltd. Co. etc. e.g. i.e. vs. a.m. p.m. "
           "U.S. U.K. Jan. Feb. No. Nos. Art. pp. Fig. approx. Capt. Gen. Rev. Hon. Rs.").split()
EMOJI = ("😀 😂 🤣 😍 🙏 👍 👍🏽 🔥 ✨ ❤️ 🎉 🤔 😭 🥺 ✅ ❌ ⭐ 🌍 🍕 🚀 👨‍💻 🏳️‍🌈 🇫🇷 ☕ ™ © ®").split()
CURRENCY = "$ € £ ¥ ₹ ₩ ₽ ₿ ¢ ₺ ₫ ₪ ฿".split()
URLS = ("https://example.com", "http://www.example.org/a/b.html", "https://x.io/?q=1&r=2#top",
        "www.example.net", "ftp://files.example.com/pub/f-1.2.tar.gz",
        "https://en.wikipedia.org/wiki/Transformer_(machine_learning_model)",
        "example.com/path", "https://例子.测试/路径")
EMAILS = ("a.b@example.com", "first-last@sub.example.co.uk", "x_y+z@mail.example.org",
          "someone@localhost")
SPACES = (" ", " ", " ", " ", "  ", "\t", "   ", "\u00a0", "\u2009", "\u3000", " \t ")
ENDS = (".", ".", "!", "?", "...", "?!", "!!", "…", "", ":", ";", ".)", ".\"", "\".", "'.", ").")


def _number(rng):
    kind = rng.randrange(9)
    n = rng.choice((rng.randrange(10), rng.randrange(1000), rng.randrange(10 ** 7)))
    if kind == 0:
        return f"{n:,}"
    if kind == 1:
        return f"{n:,}.{rng.randrange(100):02d}"
    if kind == 2:
        return f"{rng.random() * 100:.{rng.randrange(1, 4)}f}"
    if kind == 3:
        return f"{rng.randrange(101)}%"
    if kind == 4:
        return f"{rng.choice(CURRENCY)}{n:,}" + rng.choice(("", f".{rng.randrange(100):02d}"))
    if kind == 5:
        return f"{n}{rng.choice(('', ' '))}{rng.choice(CURRENCY)}"
    if kind == 6:
        return f"{rng.randrange(24)}:{rng.randrange(60):02d}"
    if kind == 7:
        return f"{rng.randrange(1900, 2030)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
    return f"{n}.{rng.randrange(10)}.{rng.randrange(10)}"


def _piece(rng):
    k = rng.randrange(20)
    if k < 7:
        return rng.choice(WORDS)
    if k < 9:
        return rng.choice(VERBS)
    return rng.choice((
        lambda: rng.choice(NAMES), lambda: rng.choice(CONTRACTIONS),
        lambda: rng.choice(ABBREVS), lambda: _number(rng), lambda: rng.choice(EMOJI),
        lambda: rng.choice(URLS), lambda: rng.choice(EMAILS),
        lambda: f"{rng.choice(WORDS)}-{rng.choice(WORDS)}",
        lambda: f"({rng.choice(WORDS)} {rng.choice(WORDS)})",
        lambda: f"\"{rng.choice(WORDS)}\"", lambda: f"'{rng.choice(WORDS)}'",
        lambda: rng.choice(("—", "–", "-", "--", "...", "…", "/", "&", "@", "#tag", "@user")),
        lambda: f"{rng.choice(WORDS)}'s", lambda: f"{rng.choice(WORDS)}s'",
        lambda: f"'{rng.randrange(10)}0s",
        lambda: rng.choice(("<unk>", "<eos>", "<formula>", "<EOS>", "<Unk>")),
    ))()


def typed_lines(rng, n):
    out = []
    for _ in range(n):
        parts = [_piece(rng) for _ in range(rng.randrange(1, 14))]
        if rng.random() < 0.5:
            parts[0] = parts[0][:1].upper() + parts[0][1:]
        line = ""
        for i, p in enumerate(parts):
            if i:
                sep = rng.choice(SPACES) if rng.random() < 0.2 else " "
                if rng.random() < 0.15:
                    sep = rng.choice((",", ";", ":", " -", ",", "...")) + sep
                line += sep
            line += p
        line += rng.choice(ENDS)
        if rng.random() < 0.1:
            line = rng.choice(("\"", "'", "“", "‘", "«", "(")) + line
        if rng.random() < 0.1:
            line = rng.choice(SPACES) + line + rng.choice(SPACES)
        out.append(line)
    return out


# --- script: words in many scripts ------------------------------------------------------------

# (name, [(first, last), ...]) of each script's block(s)
SCRIPTS = (
    ("Latin-1 and Extended-A/B", [(0x00C0, 0x024F)]), ("IPA", [(0x0250, 0x02AF)]),
    ("Greek", [(0x0370, 0x03FF)]), ("Cyrillic", [(0x0400, 0x04FF)]),
    ("Armenian", [(0x0530, 0x058F)]), ("Hebrew", [(0x0590, 0x05FF)]),
    ("Arabic", [(0x0600, 0x06FF)]), ("Syriac", [(0x0700, 0x074F)]),
    ("Thaana", [(0x0780, 0x07BF)]), ("NKo", [(0x07C0, 0x07FF)]),
    ("Devanagari", [(0x0900, 0x097F)]), ("Bengali", [(0x0980, 0x09FF)]),
    ("Gurmukhi", [(0x0A00, 0x0A7F)]), ("Gujarati", [(0x0A80, 0x0AFF)]),
    ("Oriya", [(0x0B00, 0x0B7F)]), ("Tamil", [(0x0B80, 0x0BFF)]),
    ("Telugu", [(0x0C00, 0x0C7F)]), ("Kannada", [(0x0C80, 0x0CFF)]),
    ("Malayalam", [(0x0D00, 0x0D7F)]), ("Sinhala", [(0x0D80, 0x0DFF)]),
    ("Thai", [(0x0E00, 0x0E7F)]), ("Lao", [(0x0E80, 0x0EFF)]),
    ("Tibetan", [(0x0F00, 0x0FFF)]), ("Myanmar", [(0x1000, 0x109F)]),
    ("Georgian", [(0x10A0, 0x10FF)]), ("Hangul Jamo", [(0x1100, 0x11FF)]),
    ("Ethiopic", [(0x1200, 0x137F)]), ("Cherokee", [(0x13A0, 0x13FF)]),
    ("Canadian Syllabics", [(0x1400, 0x167F)]), ("Tagalog", [(0x1700, 0x171F)]),
    ("Khmer", [(0x1780, 0x17FF)]), ("Mongolian", [(0x1800, 0x18AF)]),
    ("Balinese", [(0x1B00, 0x1B7F)]), ("Sundanese", [(0x1B80, 0x1BBF)]),
    ("Lepcha", [(0x1C00, 0x1C4F)]), ("Combining marks on Latin", [(0x0300, 0x036F)]),
    ("CJK Radicals and Kangxi", [(0x2E80, 0x2FDF)]), ("CJK Symbols", [(0x3000, 0x303F)]),
    ("Hiragana", [(0x3040, 0x309F)]), ("Katakana", [(0x30A0, 0x30FF)]),
    ("Bopomofo", [(0x3100, 0x312F)]), ("Hangul Compatibility Jamo", [(0x3130, 0x318F)]),
    ("Enclosed CJK", [(0x3200, 0x33FF)]), ("CJK Extension A", [(0x3400, 0x4DBF)]),
    ("Yijing", [(0x4DC0, 0x4DFF)]), ("CJK Unified", [(0x4E00, 0x9FFF)]),
    ("Yi", [(0xA000, 0xA4CF)]), ("Phags-pa", [(0xA840, 0xA87F)]),
    ("Saurashtra", [(0xA880, 0xA8DF)]), ("Devanagari Extended", [(0xA8E0, 0xA8FF)]),
    ("Rejang", [(0xA930, 0xA95F)]), ("Meetei Mayek", [(0xAAE0, 0xAAFF), (0xABC0, 0xABFF)]),
    ("Hangul Syllables", [(0xAC00, 0xD7A3)]), ("Hangul Jamo Extended-B", [(0xD7B0, 0xD7FF)]),
    ("CJK Compatibility Ideographs", [(0xF900, 0xFAFF)]),
    ("CJK Compatibility Forms", [(0xFE30, 0xFE4F)]),
    ("Fullwidth Latin", [(0xFF01, 0xFF5E)]), ("Halfwidth Katakana and Hangul", [(0xFF65, 0xFFDC)]),
    ("Gothic", [(0x10330, 0x1034F)]), ("Kharoshthi", [(0x10A00, 0x10A5F)]),
    ("Brahmi", [(0x11000, 0x1107F)]), ("Kaithi", [(0x11080, 0x110CF)]),
    ("Chakma", [(0x11100, 0x1114F)]), ("Mahajani", [(0x11150, 0x1117F)]),
    ("Sharada", [(0x11180, 0x111DF)]), ("Khojki", [(0x11200, 0x1124F)]),
    ("Khudawadi", [(0x112B0, 0x112FF)]), ("Grantha", [(0x11300, 0x1137F)]),
    ("Newa", [(0x11400, 0x1147F)]), ("Tirhuta", [(0x11480, 0x114DF)]),
    ("Siddham", [(0x11580, 0x115FF)]), ("Modi", [(0x11600, 0x1165F)]),
    ("Takri", [(0x11680, 0x116CF)]), ("Dogra", [(0x11800, 0x1184F)]),
    ("Nandinagari", [(0x119A0, 0x119FF)]), ("Zanabazar Square", [(0x11A00, 0x11A4F)]),
    ("Bhaiksuki", [(0x11C00, 0x11C6F)]), ("Masaram Gondi", [(0x11D00, 0x11D5F)]),
    ("Gunjala Gondi", [(0x11D60, 0x11DAF)]), ("Tangut", [(0x17000, 0x187F7)]),
    ("Kana Supplement", [(0x1B000, 0x1B0FF)]), ("Nushu", [(0x1B170, 0x1B2FB)]),
    ("Mathematical Alphanumerics", [(0x1D400, 0x1D7FF)]), ("Adlam", [(0x1E900, 0x1E95F)]),
    ("Emoji", [(0x1F300, 0x1F64F), (0x1F900, 0x1F9FF)]),
    ("CJK Extension B", [(0x20000, 0x2A6DF)]),
)
SCRIPT_PUNCT = (".", ",", "!", "?", ":", ";", "'", "-", "\u0964", "\u060c", "\u061f", "\u3002",
                "\u3001", "\uff0c", "\uff01", "\u05be", "\u0589", "\u104b", "\u0e2f", "\u2026")


def _script_chars(ranges):
    letters, marks, digits, other = [], [], [], []
    for lo, hi in ranges:
        for cp in range(lo, hi + 1):
            cat = unicodedata.category(chr(cp))
            if cat in ("Cn", "Cs", "Co"):
                continue
            (letters if cat[0] == "L" else marks if cat[0] == "M"
             else digits if cat == "Nd" else other).append(chr(cp))
    return letters, marks, digits, other


def _script_word(rng, letters, marks, digits, other):
    pool = letters or other or marks
    w = ""
    for _ in range(rng.randrange(1, 7)):
        w += rng.choice(pool)
        if marks and rng.random() < 0.4:
            w += rng.choice(marks)
    if digits and rng.random() < 0.15:
        w = "".join(rng.choice(digits) for _ in range(rng.randrange(1, 5)))
        if rng.random() < 0.5:
            w += rng.choice((",", ".")) + "".join(rng.choice(digits) for _ in range(3))
    return w


def script_lines(rng, per_script):
    out = []
    for _name, ranges in SCRIPTS:
        chars = _script_chars(ranges)
        for k in range(per_script):
            words = [_script_word(rng, *chars) for _ in range(rng.randrange(1, 8))]
            line = ""
            for i, w in enumerate(words):
                if i:
                    line += rng.choice((" ", " ", " ", "-", "'", ", ", " - ", "/", "\u00a0"))
                line += w
            if k % 3 == 1:  # with English around it
                line = f"The word \"{line}\" means {rng.choice(WORDS)}"
            elif k % 3 == 2:
                line = f"{rng.choice(WORDS)}: {line} ({rng.choice(WORDS)})"
            out.append(line + rng.choice(SCRIPT_PUNCT + ("", "")))
    return out


# --- punct: random strings over what the rules look at -----------------------------------------

PUNCT_ALPHABET = (list("abcxyzABCXYZ0123456789") + list(".,'\"`-@#$%&()[]{}<>!?;:/\\~^|*+=_") +
                  list(" " * 8) + ["\t", "\r", "\u00a0", "\u2009", "\u3000", "\u2028", "\x85",
                                   "\x0b", "\x1f", "\x7f", "\u200b", "\ufeff"] +
                  list("…–—‘’“”„‚«»´º°§¶•·×÷€£¥₹¢") +
                  ["é", "ß", "Σ", "ж", "א", "ع", "क", "\u094d", "\u093f", "日", "한", "ひ",
                   "😀", "\u0301", "\ufe0f", "\u200d", "\U00011046"] +
                  ["<unk>", "<eos>", "<formula>", "<EOS>", "<UNK>", "<eos", "eos>", "No", "Mr",
                   "pp", "Art", "e.g", "i.e", "s", "n't", "'s", "'ll", "...", "--", "@-@", "@,@",
                   "@.@", "''", "``", "\u00a0%", "\u00a0:", "n\u00ba\u00a0"])


def punct_lines(rng, n):
    out = []
    for _ in range(n):
        out.append("".join(rng.choice(PUNCT_ALPHABET) for _ in range(rng.randrange(1, 40))))
    return out


# --- unicode: random code points of every category ---------------------------------------------

def _by_category():
    cats = {}
    for cp in range(0x110000):
        if cp in (0, 0x0A):
            continue
        cat = unicodedata.category(chr(cp))
        if cat in ("Cn", "Cs"):
            continue
        cats.setdefault(cat, []).append(cp)
    return cats


def unicode_lines(rng, n):
    cats = _by_category()
    names = sorted(cats)
    out = []
    for _ in range(n):
        s = ""
        for _ in range(rng.randrange(1, 30)):
            r = rng.random()
            if r < 0.15:
                s += " "
            elif r < 0.3:
                s += rng.choice(".,'\"-!?;:()@")
            elif r < 0.45:
                s += rng.choice("abcdefghijklmnopqrstuvwxyz0123456789")
            else:
                s += chr(rng.choice(cats[rng.choice(names)]))
        out.append(s)
    return out


def lines(seed=SEED):
    """[(source, text)] of the whole corpus, in a fixed order."""
    rng = random.Random(seed)
    out = []
    out += [("wikitext", t) for t in _read_lines(os.path.join(HERE, "corpus", "wikitext.txt"))]
    out += [("chat", t) for t in _read_lines(os.path.join(HERE, "corpus", "chat.txt"))]
    austen = os.path.join(ROOT, "tests", "tools", "data", "austen-test-excerpt.txt")
    if os.path.exists(austen):
        out += [("austen", t) for t in _read_lines(austen) if t.strip()]
    out += [("typed", t) for t in typed_lines(rng, 700)]
    out += [("script", t) for t in script_lines(rng, 6)]
    out += [("punct", t) for t in punct_lines(rng, 500)]
    out += [("unicode", t) for t in unicode_lines(rng, 400)]
    for src, t in out:
        assert "\n" not in t and "\x00" not in t, (src, t)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()
    for src, t in lines(args.seed):
        sys.stdout.write(f"{src}\t{json.dumps(t, ensure_ascii=False)}\n")


if __name__ == "__main__":
    main()

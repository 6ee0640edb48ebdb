"""The tokenizer kinds over HTTP: a tiny random model with a transfo_xl (Moses) vocabulary, a
char_table (text8-style) and a byte_table (enwik8-style) one. /tokenize gives the Moses tokens'
ids, /detokenize gives the text back, /tokenizer_info names the kind and its options, a
generation streams the same text it returns whole, and text a table cannot spell is a 400 that
names the character or byte."""
import json

import xlharness as X

WORDS = ["<eos>", "<unk>", "<formula>", "Hello", ",", "world", "!", "Hi", "How", "are", "you",
         "?", "the", "@-@", "@,@", "@.@", "1", "000", "state", "of", "art", ".", "\"", "'s",
         "$", "(", ")", "a", "b", "I", "don", "'t", "know"]


def model(tmp_path, name, kind, vocab, options=None):
    d = tmp_path / name
    X.write_tiny_model(d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["xlserve_tokenizer"] = kind
    if options is not None:
        cfg["xlserve_tokenizer_options"] = options
    (d / "config.json").write_text(json.dumps(cfg))
    syms = list(vocab) + [f"w{i}" for i in range(cfg["vocab_size"] - len(vocab))]
    (d / "vocab.txt").write_text("".join(s + "\n" for s in syms), encoding="utf-8")
    return str(d), syms


def test_transfo_xl_tokenize_detokenize_info_and_generation(start_daemon, tmp_path):
    path, syms = model(tmp_path, "wt", "transfo_xl", WORDS)
    d = start_daemon(path)
    text = "Hello, world! How are you?\nI don't know the state-of-the-art (1,000 $)."
    st, _, b = X.post_json(d.port, "/tokenize", {"prompt": text, "with_pieces": True})
    assert st == 200, b
    pieces = [syms[t["id"]] for t in b["tokens"]]
    assert pieces == ["Hello", ",", "world", "!", "How", "are", "you", "?", "<eos>", "I", "don",
                      "'t", "know", "the", "state", "@-@", "of", "@-@", "the", "@-@", "art",
                      "(", "1", "@,@", "000", "$", ")", "."]
    ids = [t["id"] for t in b["tokens"]]
    st, _, b = X.post_json(d.port, "/detokenize", {"tokens": ids})
    assert st == 200 and b["content"] == text, b
    st, _, raw = X.request(d.port, "GET", "/tokenizer_info")
    info = json.loads(raw)
    assert info["tokenizer"] == "transfo_xl" and info["tokenizer_class"] == "TransfoXLTokenizer"
    assert info["eos_token"] == "<eos>" and info["unk_token"] == "<unk>"
    st, _, b = X.post_json(d.port, "/tokenize", {"prompt": "<eos>"})
    assert st == 200 and b["tokens"] == [info["eos_token_id"]], (b, info)
    assert info["options"]["never_split"] == ["<unk>", "<eos>", "<formula>"]
    assert info["options"]["delimiter"] is None and info["spells_any_text"] is False
    # a generation: its prompt counts as /tokenize counts it; streamed text == whole text
    body = {"prompt": "Hello, world!", "max_tokens": 24, "seed": 5, "temperature": 1.0}
    c = X.complete(d.port, **body)
    assert c["usage"]["prompt_tokens"] == 4
    st, _, raw = X.request(d.port, "POST", "/v1/completions", dict(body, stream=True))
    assert st == 200
    streamed = ""
    for line in raw.decode().splitlines():
        if line.startswith("data: {"):
            streamed += json.loads(line[6:])["choices"][0]["text"]
    assert streamed == c["choices"][0]["text"]
    # text_offset: where each token's text lands in the detokenized reply
    c = X.complete(d.port, **dict(body, logprobs=0, max_tokens=40))
    text, lp = c["choices"][0]["text"], c["choices"][0]["logprobs"]
    offs = lp["text_offset"]
    assert offs == sorted(offs) and len(offs) == len(lp["tokens"])
    words = [(o, t.strip()) for o, t in zip(offs, lp["tokens"]) if t.strip().isalnum()]
    assert words
    for o, w in words:
        assert text[o:].lstrip(" ").startswith(w), (o, w, text)
    # structured output needs a byte-level model
    st, _, b = X.post_json(d.port, "/v1/completions",
                           {"prompt": "a", "response_format": {"type": "json_object"}})
    assert st == 400 and b["error"]["param"] == "response_format", b


def test_char_table_refuses_with_the_character_named(start_daemon, tmp_path):
    path, syms = model(tmp_path, "t8", "char_table", ["_"] + list("abcdefghijklmnopqrstuvwxyz"))
    d = start_daemon(path)
    st, _, b = X.post_json(d.port, "/tokenize", {"prompt": "Hello World"})
    assert st == 200 and "".join(syms[i] for i in b["tokens"]) == "hello_world", b
    st, _, b = X.post_json(d.port, "/detokenize", {"tokens": b["tokens"]})
    assert st == 200 and b["content"] == "hello world"
    for path_, body in (("/tokenize", {"prompt": "Hi!"}),
                        ("/v1/completions", {"prompt": "Hi!", "max_tokens": 1})):
        st, _, b = X.post_json(d.port, path_, body)
        assert st == 400 and b["error"]["code"] == "tokenizer_error", b
        assert "'!'" in b["error"]["message"], b
    st, _, raw = X.request(d.port, "GET", "/tokenizer_info")
    info = json.loads(raw)
    opts = info["options"]
    assert opts == {"unknown": "refuse", "lower_case": True, "spell_digits": False,
                    "space_symbol": "_"}
    # text8 is one line of words: the space is the start token scorers put before a text
    assert info["eos_token"] == " " and info["eos_token_id"] == syms.index("_"), info


def test_byte_table_refuses_with_the_byte_named(start_daemon, tmp_path):
    vocab = [str(b) for b in range(32, 127)] + ["195", "169"]
    path, syms = model(tmp_path, "e8", "byte_table", vocab)
    d = start_daemon(path)
    st, _, b = X.post_json(d.port, "/tokenize", {"prompt": "caf\u00e9"})
    assert st == 200 and [int(syms[i]) for i in b["tokens"]] == list("caf\u00e9".encode()), b
    st, _, b = X.post_json(d.port, "/detokenize", {"tokens": b["tokens"]})
    assert st == 200 and b["content"] == "caf\u00e9"
    st, _, b = X.post_json(d.port, "/tokenize", {"prompt": "a\tb"})
    assert st == 400 and "byte 9 (0x09" in b["error"]["message"], b
    # a table without byte 10 has no start token to offer
    st, _, raw = X.request(d.port, "GET", "/tokenizer_info")
    info = json.loads(raw)
    assert info["eos_token"] is None and info["eos_token_id"] is None, info
    # one with it: the newline, as for byte models
    path, syms = model(tmp_path / "nl", "e8", "byte_table", vocab + ["10"])
    d = start_daemon(path)
    st, _, raw = X.request(d.port, "GET", "/tokenizer_info")
    info = json.loads(raw)
    assert info["eos_token"] == "\n" and syms[info["eos_token_id"]] == "10", info


def echo_logprobs(port, prompt, max_tokens, **extra):
    c = X.complete(port, prompt=prompt, max_tokens=max_tokens, echo=True, logprobs=1, seed=3,
                   temperature=1.0, **extra)
    ch = c["choices"][0]
    return ch["text"].encode(), ch["logprobs"]


def pieces_of(text, offs):
    """token i's contribution: text[offs[i]:offs[i + 1]] (the last one to the end); checks that
    the offsets start at 0, never decrease and stay inside the text, so the pieces concatenate
    to the whole text"""
    assert offs and offs[0] == 0 and offs == sorted(offs) and offs[-1] <= len(text), offs
    ends = offs[1:] + [len(text)]
    pieces = [text[a:b] for a, b in zip(offs, ends)]
    assert b"".join(pieces) == text
    return pieces


def check_echo(port, prompt, prompt_pieces, n_gen):
    """echo + logprobs with max_tokens 0 and n_gen: the echoed text is the detokenized prompt
    (as /detokenize gives it), each prompt token's text_offset is where the detokenizer put it,
    the reply follows with its own offsets (as without echo)"""
    st, _, b = X.post_json(port, "/tokenize", {"prompt": prompt})
    assert st == 200
    st, _, dt = X.post_json(port, "/detokenize", {"tokens": b["tokens"]})
    assert st == 200
    detok = dt["content"].encode()
    text, lp = echo_logprobs(port, prompt, 0)
    assert text == detok
    assert len(lp["tokens"]) == len(lp["text_offset"]) == len(prompt_pieces)
    assert pieces_of(text, lp["text_offset"]) == prompt_pieces
    text, lp = echo_logprobs(port, prompt, n_gen)
    np_ = len(prompt_pieces)
    assert text.startswith(detok) and len(lp["text_offset"]) == np_ + n_gen
    pieces = pieces_of(text, lp["text_offset"])
    assert pieces[:np_ - 1] == prompt_pieces[:-1]
    assert lp["text_offset"][np_] == len(detok)  # the reply starts after the whole prompt
    c = X.complete(port, prompt=prompt, max_tokens=n_gen, logprobs=1, seed=3, temperature=1.0)
    reply, rlp = c["choices"][0]["text"].encode(), c["choices"][0]["logprobs"]
    assert text == detok + reply
    assert lp["text_offset"][np_:] == [len(detok) + o for o in rlp["text_offset"]]
    assert lp["tokens"][np_:] == rlp["tokens"]
    return text, lp, pieces


def test_echo_text_offsets_follow_the_detokenizer(start_daemon, tmp_path):
    # transfo_xl: Moses spacing ("Hello , world !" -> "Hello, world!")
    path, syms = model(tmp_path, "wt", "transfo_xl", WORDS)
    d = start_daemon(path)
    # a space the detokenizer puts before a word belongs to the word (as its token " world")
    text, lp = echo_logprobs(d.port, "Hello, world!", 0)
    assert text == b"Hello, world!" and lp["text_offset"] == [0, 5, 6, 12]
    assert lp["token_logprobs"][0] is None and len(lp["token_logprobs"]) == 4
    check_echo(d.port, "Hello, world!", [b"Hello", b",", b" world", b"!"], 30)
    check_echo(d.port, "Hello ,world", [b"Hello", b",", b" world"], 30)
    # the state-of-the-art: "@-@" joins its neighbours, " @,@ " becomes ","
    text, lp, pieces = check_echo(d.port, "state-of-the-art 1,000", [
        b"state", b"-", b"of", b"-", b"the", b"-", b"art", b" 1", b",", b"000"], 40)
    for tok, piece in zip(lp["tokens"][10:], pieces[10:]):  # generated words land as words
        if tok.strip().isalnum():
            assert piece.strip(b" ") == tok.strip().encode() or piece.endswith(b"-"), (tok, piece)
    # words: a word with the space before it; <eos> is a newline that starts a line
    path, syms = model(tmp_path, "wd", "words", WORDS)
    d = start_daemon(path)
    check_echo(d.port, "Hello world\nHi you", [b"Hello", b" world", b"\n", b"Hi", b" you"], 20)
    # char_table: "_" stands for a space
    path, syms = model(tmp_path, "t8", "char_table", ["_"] + list("abcdefghijklmnopqrstuvwxyz"))
    d = start_daemon(path)
    check_echo(d.port, "Hello World", [bytes([c]) for c in b"hello world"], 20)
    # byte_table: a two-byte character is two tokens, the first one placed where it starts
    path, syms = model(tmp_path, "e8", "byte_table",
                       [str(b) for b in range(32, 127)] + ["195", "169"])
    d = start_daemon(path)
    check_echo(d.port, "caf\u00e9 ok", [b"c", b"a", b"f", b"\xc3", b"\xa9", b" ", b"o", b"k"], 20)


def test_transfo_xl_stop_sequences_match_the_detokenized_text(start_daemon, tmp_path):
    path, syms = model(tmp_path, "wt", "transfo_xl", WORDS)
    d = start_daemon(path)
    body = {"prompt": "Hello, world!", "max_tokens": 40, "seed": 9, "temperature": 1.0}
    full = X.complete(d.port, **body)["choices"][0]["text"]
    words = [w for w in full.split() if w.startswith("w") and w[1:].isdigit()]
    assert len(words) >= 3, full
    stop = words[2]
    cut = full.index(stop)
    for stream in (False, True):
        if stream:
            st, _, raw = X.request(d.port, "POST", "/v1/completions",
                                   dict(body, stop=[stop], stream=True))
            assert st == 200
            chunks = [json.loads(l[6:]) for l in raw.decode().splitlines()
                      if l.startswith("data: {")]
            text = "".join(ch["choices"][0]["text"] for ch in chunks if ch["choices"])
            reason = [ch["choices"][0]["finish_reason"] for ch in chunks if ch["choices"]][-1]
        else:
            ch = X.complete(d.port, **dict(body, stop=[stop]))["choices"][0]
            text, reason = ch["text"], ch["finish_reason"]
        assert text == full[:cut] and reason == "stop", (stream, text, full, stop)

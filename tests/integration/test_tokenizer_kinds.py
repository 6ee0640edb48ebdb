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
    opts = json.loads(raw)["options"]
    assert opts == {"unknown": "refuse", "lower_case": True, "spell_digits": False,
                    "space_symbol": "_"}


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

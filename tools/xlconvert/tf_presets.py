"""The authors' flags for their released TensorFlow models (kimiyoung/transformer-xl,
tf/sota/{enwik8,text8,wt103,lm1b}.sh: the evaluation runs of the checkpoints that
tf/sota/download.sh fetches), and their data pipeline's choices (tf/data_utils.py,
tf/vocabulary.py). Architecture values are checked against the checkpoint's tensor shapes;
mem_len, tgt_len, clamp_len and same_length are the evaluation settings of those scripts.

untie_r, div_val, proj_share_all_but_first and proj_same_dim not given in a script take
train_gpu.py's defaults (False, 1, False, True). Cutoffs come from data_utils.Corpus (also
recorded in the archive's corpus-info.json as [0, c1, ..., vocab_size]).
"""

PRESETS = {
    "enwik8": dict(
        n_layer=24, d_model=1024, d_embed=1024, n_head=8, d_head=128, d_inner=3072,
        div_val=1, cutoffs=[], untie_r=False, proj_share_all_but_first=False,
        proj_same_dim=True, tgt_len=128, mem_len=3800, clamp_len=1000, same_length=True,
        checkpoint="model/model.ckpt-0",
        # symbols: byte values as decimal strings, frequency order, no <eos> (newlines were
        # removed by encode_file(add_eos=False))
        tokenizer="byte_table"),
    "text8": dict(
        n_layer=24, d_model=1024, d_embed=1024, n_head=8, d_head=128, d_inner=3072,
        div_val=1, cutoffs=[], untie_r=False, proj_share_all_but_first=False,
        proj_same_dim=True, tgt_len=128, mem_len=3800, clamp_len=1000, same_length=True,
        checkpoint="model/model.ckpt-0",
        # symbols: "a".."z" and "_" (space), frequency order
        tokenizer="char_table"),
    "wt103": dict(
        n_layer=18, d_model=1024, d_embed=1024, n_head=16, d_head=64, d_inner=4096,
        div_val=4, cutoffs=[20000, 40000, 200000], untie_r=True,
        proj_share_all_but_first=True, proj_same_dim=True, tgt_len=128, mem_len=1600,
        clamp_len=1000, same_length=True, checkpoint="model/model.ckpt-0",
        # Vocab(special=["<eos>"], lower_case=False), whitespace-split words, <eos> per line
        tokenizer="words"),
    "lm1b": dict(
        n_layer=24, d_model=1280, d_embed=1280, n_head=16, d_head=80, d_inner=8192,
        div_val=4, cutoffs=[60000, 100000, 640000], untie_r=True,
        proj_share_all_but_first=False, proj_same_dim=False, tgt_len=32, mem_len=128,
        clamp_len=-1, same_length=True, checkpoint="model/model.ckpt-1191000",
        # Vocab(vocab_file=1b_word_vocab.txt, lower_case=False): cased words, <UNK>, each
        # sentence framed as <S> w1 ... wn <S> (encode_file(add_double_eos=True))
        tokenizer="words"),
}

ARCH_KEYS = ("n_layer", "d_model", "d_embed", "n_head", "d_head", "d_inner", "div_val",
             "cutoffs", "untie_r", "proj_share_all_but_first", "proj_same_dim")
EVAL_KEYS = ("tgt_len", "mem_len", "clamp_len", "same_length")


# The authors' tf/data_utils.py Vocab(lower_case=...) per dataset (the class default is True).
LOWER_CASE = {"enwik8": True, "text8": True, "wt103": False, "lm1b": False}


def tokenizer_for(dataset, symbols, meta=None):
    """(xlserve_tokenizer, xlserve_tokenizer_options) for a released model's vocabulary, by the
    converters' shared rule (xlconvert.vocab_kinds). DATASET: the preset name (or
    corpus-info.json's "dataset"); META: what the vocabulary file said about itself."""
    from xlconvert import vocab_kinds
    meta = dict(meta or {}, format="authors")
    if dataset is not None:
        meta["dataset"] = dataset
        meta.setdefault("lower_case", LOWER_CASE.get(dataset, False))
    return vocab_kinds.tokenizer_for(symbols, meta)

"""A re-statement (for tests only) of the paper authors' corpus cache (kimiyoung/transformer-xl,
pytorch/data_utils.py: Corpus and get_lm_corpus), written independently for xlserve's converter
tests, with their module name so that a pickled Corpus names `data_utils.Corpus` as theirs does.

What their code stores in DATADIR/cache.pt (torch.save of the Corpus), per dataset:
  - dataset, vocab (utils.vocabulary.Vocab), train / valid / test;
  - wt103 / wt2 / ptb: vocabulary counted from the text files (special ['<eos>']; lower_case
    False for wt103 and wt2, True for ptb), each split one ordered LongTensor with '<eos>' at
    each line end;
  - enwik8 / text8: the Vocab defaults (no special symbols, lower_case True), counted from all
    three splits, each split one ordered LongTensor WITHOUT end-of-line symbols (the line breaks
    of the prepared files vanish);
  - lm1b: the vocabulary read from a vocab file (no counting), train a list of file names,
    valid / test lists of per-line LongTensors framed by '<S>'.
The prepared text files are what the preparation scripts of their getdata.sh write: enwik8
bytes as decimal numbers separated by spaces, a newline byte starting a new line (see
prepare_enwik8); text8 characters separated by spaces with '_' for a space (see prepare_text8).
"""
import os

import torch

from utils.vocabulary import Vocab

SPLITS = ("train", "valid", "test")


class Corpus(object):
    def __init__(self, path, dataset, *args, **kwargs):
        self.dataset = dataset
        self.vocab = Vocab(*args, **kwargs)
        files = {s: os.path.join(path, s + ".txt") for s in SPLITS}
        if dataset in ("ptb", "wt2", "enwik8", "text8"):
            for s in SPLITS:
                self.vocab.count_file(files[s])
        elif dataset == "wt103":
            self.vocab.count_file(files["train"])
        self.vocab.build_vocab()
        if dataset in ("ptb", "wt2", "wt103"):
            for s in SPLITS:
                setattr(self, s, self.vocab.encode_file(files[s], ordered=True))
        elif dataset in ("enwik8", "text8"):
            for s in SPLITS:
                setattr(self, s, self.vocab.encode_file(files[s], ordered=True, add_eos=False))
        elif dataset == "lm1b":
            self.train = [files["train"]]
            self.valid = self.vocab.encode_file(files["valid"], add_double_eos=True)
            self.test = self.vocab.encode_file(files["test"], add_double_eos=True)


def get_lm_corpus(datadir, dataset, legacy_format=False):
    """Builds the Corpus and saves DATADIR/cache.pt (legacy_format: the pre-1.6 torch.save
    format of 2019 caches)."""
    kwargs = {}
    if dataset in ("wt103", "wt2"):
        kwargs = dict(special=["<eos>"], lower_case=False)
    elif dataset == "ptb":
        kwargs = dict(special=["<eos>"], lower_case=True)
    elif dataset == "lm1b":
        kwargs = dict(special=[], lower_case=False,
                      vocab_file=os.path.join(datadir, "1b_word_vocab.txt"))
    corpus = Corpus(datadir, dataset, **kwargs)
    torch.save(corpus, os.path.join(datadir, "cache.pt"),
               _use_new_zipfile_serialization=not legacy_format)
    return corpus


def prepare_enwik8(raw, datadir, n_test):
    """Writes train/valid/test.txt from RAW bytes as the enwik8 preparation does: the last
    2 * n_test bytes are valid and test; each byte its decimal value, space separated, and a
    newline byte a line break instead of a symbol."""
    parts = {"train": raw[:-2 * n_test], "valid": raw[-2 * n_test:-n_test],
             "test": raw[-n_test:]}
    for name, part in parts.items():
        text = " ".join("\n" if b == 10 else str(b) for b in part)
        with open(os.path.join(datadir, name + ".txt"), "w", encoding="utf-8") as f:
            f.write(text)


def prepare_text8(text, datadir, n_test):
    """Writes train/valid/test.txt from TEXT (lowercase letters and spaces) as the text8
    preparation does: one line of characters separated by spaces, '_' standing for a space."""
    parts = {"train": text[:-2 * n_test], "valid": text[-2 * n_test:-n_test],
             "test": text[-n_test:]}
    for name, part in parts.items():
        line = " ".join("_" if c == " " else c for c in part.strip())
        with open(os.path.join(datadir, name + ".txt"), "w", encoding="utf-8") as f:
            f.write(line)

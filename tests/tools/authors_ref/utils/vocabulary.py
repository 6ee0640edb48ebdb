"""A re-statement (for tests only) of the paper authors' vocabulary class (kimiyoung/transformer-xl,
pytorch/utils/vocabulary.py), written independently for xlserve's converter tests. What matters
for the converter is what a pickled instance holds, so the attribute names and their meaning
follow theirs: counter, special, min_freq, max_size, lower_case, delimiter, vocab_file, idx2sym,
sym2idx, and `<name>_idx` for each special symbol. Pickles name it `utils.vocabulary.Vocab`, as
theirs do.

Their rules, as this class applies them:
  - a line is stripped, lowercased when lower_case, and split on `delimiter` (None: any run of
    whitespace); ['<S>'] + symbols + ['<S>'] when add_double_eos (lm1b), symbols + ['<eos>']
    when add_eos;
  - build_vocab: the special symbols first, then every counted symbol by decreasing count (ties
    in first-seen order, as Counter.most_common gives them), stopping below min_freq or at
    max_size; or, with vocab_file, the first field of each line of that file in order (then
    '<UNK>' must be among them);
  - an unknown symbol encodes as unk_idx.
"""
import collections

import torch


class Vocab(object):
    def __init__(self, special=(), min_freq=0, max_size=None, lower_case=True, delimiter=None,
                 vocab_file=None):
        self.counter = collections.Counter()
        self.special = list(special)
        self.min_freq = min_freq
        self.max_size = max_size
        self.lower_case = lower_case
        self.delimiter = delimiter
        self.vocab_file = vocab_file

    def tokenize(self, line, add_eos=False, add_double_eos=False):
        line = line.strip()
        if self.lower_case:
            line = line.lower()
        syms = list(line) if self.delimiter == "" else line.split(self.delimiter)
        if add_double_eos:
            return ["<S>"] + syms + ["<S>"]
        return syms + ["<eos>"] if add_eos else syms

    def count_file(self, path, add_eos=False):
        sents = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                syms = self.tokenize(line, add_eos=add_eos)
                self.counter.update(syms)
                sents.append(syms)
        return sents

    def add_special(self, sym):
        if sym not in self.sym2idx:
            self.add_symbol(sym)
            setattr(self, sym.strip("<>") + "_idx", self.sym2idx[sym])

    def add_symbol(self, sym):
        if sym not in self.sym2idx:
            self.sym2idx[sym] = len(self.idx2sym)
            self.idx2sym.append(sym)

    def build_vocab(self):
        self.idx2sym = []
        self.sym2idx = collections.OrderedDict()
        if self.vocab_file:
            with open(self.vocab_file, encoding="utf-8") as f:
                for line in f:
                    self.add_symbol(line.strip().split()[0])
            self.unk_idx = self.sym2idx["<UNK>"]
            return
        for sym in self.special:
            self.add_special(sym)
        for sym, n in self.counter.most_common(self.max_size):
            if n < self.min_freq:
                break
            self.add_symbol(sym)

    def get_idx(self, sym):
        if sym in self.sym2idx:
            return self.sym2idx[sym]
        return self.unk_idx

    def encode_file(self, path, ordered=False, add_eos=True, add_double_eos=False):
        out = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                syms = self.tokenize(line, add_eos=add_eos, add_double_eos=add_double_eos)
                out.append(torch.LongTensor([self.get_idx(s) for s in syms]))
        return torch.cat(out) if ordered else out

    def __len__(self):
        return len(self.idx2sym)

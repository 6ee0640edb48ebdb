"""Byte-level data for the trainer: a file's bytes as token ids, cut into B parallel streams
that are read tgt_len tokens at a time (the reference's ordered LM iterator), with the memory
carried from one segment of a stream to the next. Each epoch starts at a new random offset
(so segment boundaries move) and resets the memory."""
import os

import numpy as np
import torch


def load_bytes(path):
    with open(path, "rb") as f:
        return torch.from_numpy(np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64))


def load_split(data_dir, split):
    path = os.path.join(data_dir, split + ".txt")
    if not os.path.exists(path):
        raise SystemExit(f"{path} not found: run tools/corpus/prepare.py --out {data_dir}")
    return load_bytes(path)


class StreamBatcher:
    """Yields (inputs [B,T], targets [B,T], new_epoch) forever. State (epoch, offset, position)
    is a small dict so a resumed run continues exactly where it stopped."""

    def __init__(self, data, batch, tgt_len, seed):
        self.data, self.B, self.T = data, batch, tgt_len
        self.seed = seed
        self.state = {"epoch": -1, "offset": 0, "pos": 0, "steps_in_epoch": 0}
        if (data.numel() - tgt_len) // batch < 2 * tgt_len:
            raise SystemExit(f"{data.numel()} tokens is too little data for batch {batch} x "
                             f"tgt_len {tgt_len}")

    def _start_epoch(self):
        st = self.state
        st["epoch"] += 1
        g = np.random.default_rng(self.seed * 1000003 + st["epoch"])
        st["offset"] = int(g.integers(0, self.T)) if st["epoch"] > 0 else 0
        L = (self.data.numel() - 1 - st["offset"]) // self.B
        st["steps_in_epoch"] = L // self.T
        st["pos"] = 0

    def next(self):
        st = self.state
        new_epoch = False
        if st["epoch"] < 0 or st["pos"] >= st["steps_in_epoch"]:
            self._start_epoch()
            new_epoch = True
        L = (self.data.numel() - 1 - st["offset"]) // self.B
        starts = st["offset"] + torch.arange(self.B) * L + st["pos"] * self.T
        idx = starts[:, None] + torch.arange(self.T + 1)[None, :]
        seg = self.data[idx]
        st["pos"] += 1
        return seg[:, :-1], seg[:, 1:], new_epoch

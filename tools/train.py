#!/usr/bin/python3
"""Entry point of the trainer (tools/xltrain): trains a byte-level Transformer-XL on the corpus
made by tools/corpus/prepare.py and exports an xlserve model directory. See --help."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from xltrain.train import main  # noqa: E402

if __name__ == "__main__":
    main()

"""Test-only package named like the paper authors' pytorch/utils (see vocabulary.py)."""

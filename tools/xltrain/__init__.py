"""xltrain: the project's Transformer-XL trainer (PyTorch): model, data, training loop, export."""

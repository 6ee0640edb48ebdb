"""xlconvert: converting Transformer-XL checkpoints (the authors' PyTorch code, Hugging Face
TransfoXL) to the xlserve model directory, reading untrusted files without executing them."""

"""attnkit: attention mechanisms for PyTorch, from Bahdanau to the Transformer."""
__version__ = "0.1.0"

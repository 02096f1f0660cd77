"""specdec_core: the speculative decoding engine (torch + transformers, no Qt)."""

__version__ = "0.1.0"

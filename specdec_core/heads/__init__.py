"""Drafting heads and models, one package per family: their modules and the published formats they
are read from and written to."""

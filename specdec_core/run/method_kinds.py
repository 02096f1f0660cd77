"""The methods' names, and which draft a tree, without importing the drafters (and so torch).

What the window's process, `specdec export` and the CLI's flags need to know about a method
before any model is built: its name (the CLI's choices, so a mistyped method is refused before
torch loads), and whether it drafts a tree (a tree method has a tree size to tune and export
instead of a chain length k). specdec_core/run/methods.py, the registry of drafters, declares the
same names and flags; tests/test_method_kinds.py checks that both say the same.
"""

from __future__ import annotations

METHOD_NAMES = (
    "ar", "eagle", "eagle2", "eagle2-lookup", "eagle2-suffix", "medusa", "mlp-speculator", "mtp",
    "mtp-tree", "classic", "pard", "dflash", "ddtree", "peagle", "ngram", "suffix", "lookahead",
    "layer-skip", "swift",
)  # fmt: skip
HF_METHODS = ("hf-generate", "hf-assisted", "hf-lookup")  # transformers' own (baselines.py)
TREE_METHODS = frozenset(
    {"eagle2", "eagle2-lookup", "eagle2-suffix", "medusa", "mtp-tree", "ddtree"}
)


def is_tree(name: str) -> bool:
    """Does method `name` draft a tree? (False for names outside the registry: HF baselines.)"""
    return name in TREE_METHODS

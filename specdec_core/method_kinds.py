"""Which methods draft a tree, by name, without importing the drafters (and so torch).

What the window's process and `specdec export` need to know about a method before any model
is built: a tree method has a tree size to tune and export instead of a chain length k.
specdec_core/methods.py, the registry of drafters, declares the same flag on each method and
answers `is_tree` from here; tests/test_method_kinds.py checks that both name the same methods.
"""

from __future__ import annotations

TREE_METHODS = frozenset({"eagle2", "eagle2-lookup", "eagle2-suffix", "medusa", "mtp-tree"})


def is_tree(name: str) -> bool:
    """Does method `name` draft a tree? (False for names outside the registry: HF baselines.)"""
    return name in TREE_METHODS

"""Work around a reference-counting bug of PySide6 6.12.0 on CPython < 3.12.

In PySide6 6.12.0 `SignalInstance.emit()` returns `True` / `False` without taking a
reference, and slot calls drop one reference to `None`; every emit therefore lowers the
refcount of a singleton by one. After a few hundred emits (pyqtgraph emits on every redraw)
CPython aborts with "Fatal Python error: bool_dealloc" / "none_dealloc". CPython 3.12 made
these singletons immortal, so the bug is invisible there, which is why it shipped.

pyproject.toml excludes 6.12.0; for an environment that has it anyway, `apply()` makes the
three singletons effectively immortal by raising their reference counts by 2**40 (they are
static objects that are never freed, so the only effect is that the count cannot reach 0).
"""

from __future__ import annotations

import ctypes
import sys

BROKEN = ("6.12.0",)
_BUMP = 2**40
_applied = False


def needs_workaround(pyside_version: str, python: tuple[int, int]) -> bool:
    return pyside_version in BROKEN and python < (3, 12)


def apply() -> bool:
    """Apply the workaround once if this PySide6 / Python pair needs it; True if applied."""
    global _applied
    import PySide6

    if _applied or not needs_workaround(PySide6.__version__, sys.version_info[:2]):
        return _applied
    if sys.implementation.name != "cpython":
        return False
    for singleton in (True, False, None):
        ctypes.c_ssize_t.from_address(id(singleton)).value += _BUMP
    _applied = True
    return True

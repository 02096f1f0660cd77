"""Every method has its own colour: no two methods shown together in Compare, the plots or a
sweep share one, however many the registry holds; the common methods keep their colours."""

from __future__ import annotations

import itertools
import math

from app.engine_api import MethodInfo, Registries
from app.method_style import MethodStyle
from app.palette import AR_COLOR
from app.session import Session
from specdec_core.run.methods import METHODS


def _style() -> MethodStyle:
    session = Session()
    methods = tuple(MethodInfo(m.name, m.label, m.needs) for m in METHODS.values())
    session.set_registries(Registries(methods, ()))
    return MethodStyle(session)


def _rgb(color: str) -> tuple[int, ...]:
    return tuple(int(color[i : i + 2], 16) for i in (1, 3, 5))


def test_every_method_of_the_registry_has_its_own_colour():
    style = _style()
    colors = {name: style.color(name) for name in METHODS}
    assert len(METHODS) >= 15
    assert len(set(colors.values())) == len(colors)
    assert colors["ar"] == AR_COLOR
    for a, b in itertools.combinations(colors.values(), 2):  # told apart, not just unequal
        assert math.dist(_rgb(a), _rgb(b)) > 40, (a, b)


def test_the_common_methods_keep_their_colours():
    style = _style()
    assert style.color("eagle") == "#E69F00"
    assert style.color("eagle2") == "#009E73"
    assert style.color("eagle2-lookup") == "#CC79A7"
    assert style.color("eagle2-suffix") == "#D55E00"


def test_methods_the_registry_lacks_differ_from_every_other_method_shown():
    style = _style()
    known = {style.color(name) for name in METHODS}
    extra = ["hf-generate", "hf-assisted", "hf-lookup", *(f"other-{i}" for i in range(30))]
    colors = [style.color(name) for name in extra]
    assert len(set(colors)) == len(colors) and not known & set(colors)
    assert [style.color(name) for name in extra] == colors  # the same colour when asked again


def test_before_the_registries_are_read_methods_still_differ():
    style = MethodStyle(Session())
    names = ["eagle", "classic", "ngram", "suffix"]
    colors = [style.color(name) for name in names]
    assert len(set(colors)) == len(names)
    assert style.color("ar") == AR_COLOR

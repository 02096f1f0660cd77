"""How the window names and colours a method: its label and colour from the engine's
registries. Qt-free.

Every method of the registry has its own colour, so no two methods shown together (Compare's
columns and table, the plots, a sweep) share one: autoregressive the neutral grey, the others
by their place in the registry, through the Okabe-Ito colours first (so the common methods
keep the colours they always had), then `MORE_COLORS`, picked to stay apart from those and
from each other, then hues a golden angle apart. A method the registry lacks (or any method
before the registries are read) takes the next colour after the registry's, in the order it
is first asked for, so it too differs from every other method shown."""

from __future__ import annotations

import colorsys

from app.palette import AR_COLOR, METHOD_COLORS
from app.session import Session

# after the Okabe-Ito colours: indigo, dark brown, magenta, leaf green, olive, wine, salmon
# (each at least 30 CIE76 units from the Okabe-Ito colours, the grey, the text and each other)
MORE_COLORS = ("#332288", "#661100", "#CF1C90", "#73AF48", "#BCBD22", "#882255", "#F97B72")
# the methods' colours in order: Okabe-Ito's blue, the reference run's before, comes last
SEQUENCE = (*METHOD_COLORS[1:], METHOD_COLORS[0], *MORE_COLORS)
GOLDEN_ANGLE = 137.508  # degrees between the hues of the colours past SEQUENCE


def nth_color(index: int) -> str:
    """The colour of the `index`-th method besides autoregressive (from 0); never repeats."""
    if index < len(SEQUENCE):
        return SEQUENCE[index]
    beyond = index - len(SEQUENCE)
    hue = (beyond * GOLDEN_ANGLE) % 360 / 360
    lightness = (0.38, 0.5, 0.62)[beyond % 3]
    red, green, blue = colorsys.hls_to_rgb(hue, lightness, 0.65)
    return "#{:02X}{:02X}{:02X}".format(*(round(255 * c) for c in (red, green, blue)))


class MethodStyle:
    def __init__(self, session: Session) -> None:
        self.session = session
        self._unknown: list[str] = []  # methods the registry lacks, in the order first asked

    def label(self, method: str) -> str:
        registries = self.session.registries
        info = registries.method(method) if registries is not None else None
        return info.label if info is not None else method

    def color(self, method: str) -> str:
        if method == "ar":
            return AR_COLOR
        registries = self.session.registries
        names = [m.name for m in registries.methods] if registries is not None else []
        others = [name for name in names if name != "ar"]
        if method in others:
            return nth_color(others.index(method))
        if method not in self._unknown:
            self._unknown.append(method)
        return nth_color(len(others) + self._unknown.index(method))

"""How the window names and colours a method: its label and colour from the engine's
registries (the method's name and the first colour before they are read). Qt-free."""

from __future__ import annotations

from app.palette import method_color
from app.session import Session


class MethodStyle:
    def __init__(self, session: Session) -> None:
        self.session = session

    def label(self, method: str) -> str:
        registries = self.session.registries
        info = registries.method(method) if registries is not None else None
        return info.label if info is not None else method

    def color(self, method: str) -> str:
        registries = self.session.registries
        names = [m.name for m in registries.methods] if registries is not None else []
        return method_color(method, names.index(method) if method in names else 0)

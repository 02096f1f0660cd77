"""The playground's state without Qt: what is loaded, what runs, and the last results.

The window and the sweep view observe a `Session` the way napari's Qt views observe its
Qt-free components: controllers change it (`set_registries`, `set_target`, `begin`, `end`,
`report`), and every change calls the observers connected with `on_change(callback)` with the
name of what changed. Nothing here imports Qt, so the state and its rules (`ready`, what may
start while something else runs) are tested without a window.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.engine_api import Registries, TargetInfo, engine_ended


class Activity(StrEnum):
    IDLE = "idle"
    STARTING = "starting"  # importing the engine, reading its registries
    LOADING = "loading"  # a target model
    RUNNING = "running"  # Generate or Compare
    MEASURING = "measuring"  # a sweep or Tune
    ADAPTING = "adapting"  # fine-tuning the EAGLE head between runs


@dataclass(frozen=True)
class Message:
    """Something the user should read: an error (`user`: caused by input) or a note."""

    text: str
    error: bool = True
    user: bool = True


Observer = Callable[[str], None]


@dataclass
class Session:
    registries: Registries | None = None
    target: TargetInfo | None = None
    activity: Activity = Activity.STARTING
    compare_mode: bool = False  # the current or last run queue is a Compare
    last_message: Message | None = None
    last_results: dict[str, Any] = field(default_factory=dict)  # kind -> last result
    _observers: list[Observer] = field(default_factory=list, repr=False)

    # -- observing --------------------------------------------------------------------------
    def on_change(self, observer: Observer) -> None:
        self._observers.append(observer)

    def _changed(self, what: str) -> None:
        for observer in list(self._observers):
            observer(what)

    # -- rules ------------------------------------------------------------------------------
    def ready(self) -> bool:
        """A run, a comparison, a sweep or a load may start now."""
        return (
            self.registries is not None
            and self.target is not None
            and self.activity is Activity.IDLE
        )

    @property
    def busy(self) -> bool:
        return self.activity is not Activity.IDLE

    # -- changes ----------------------------------------------------------------------------
    def set_registries(self, registries: Registries) -> None:
        self.registries = registries
        self._changed("registries")

    def set_target(self, target: TargetInfo | None) -> None:
        self.target = target
        self._changed("target")

    def begin(self, activity: Activity, compare: bool = False) -> None:
        self.activity = activity
        if activity is Activity.RUNNING:
            self.compare_mode = compare
        self._changed("activity")

    def end(self) -> None:
        self.activity = Activity.IDLE
        self._changed("activity")

    def keep(self, kind: str, result: Any) -> None:
        """The last result of a kind of work ('run', 'sweep', 'tune')."""
        self.last_results[kind] = result
        self._changed(f"result:{kind}")

    def report(self, text: str, error: bool = True, user: bool = True) -> None:
        """Something to read. A failure that reports the engine's death also means that what
        it had loaded is gone: the target is forgotten first, so nothing starts until Restart
        engine (or Load) brings a model back."""
        if error and not user and engine_ended(text) and self.target is not None:
            self.set_target(None)
        self.last_message = Message(text, error, user)
        self._changed("message")

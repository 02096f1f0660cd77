"""Where a drafter's folder is: `embedded` (the one bundled), a local directory or a hub id.

Every drafter kind that is one folder of config.json + weights (an MLP speculator, a DFlash
drafter) is found the same way, and says what is wrong in the same words: `FolderKind` names
the kind for its messages, `check_spec` refuses a spec that can be none of the three before a
model loads, `resolve` gives the folder (the hub snapshot fetched, its config.json checked before
any weight), and `read_config` its config.json as a JSON object.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specdec_core.control import Progress, StopFlag
from specdec_core.errors import SpecdecError
from specdec_core.models import hub
from specdec_core.resources import resource_path

CONFIG = "config.json"


@dataclass(frozen=True)
class FolderKind:
    what: str  # "MLP speculator": the kind, in messages
    noun: str  # "speculator": one of them, in "give a ... directory"
    flag: str  # "--speculator": the option that names one
    bundled: str  # the folder under resources/ of the one bundled for the embedded model
    train: str  # "specdec train mlp-speculator": how to make one


def check_spec(spec: str, kind: FolderKind) -> None:
    """Refuse a spec that is neither `embedded`, a directory nor a hub id."""
    if spec == "embedded":
        return
    path = Path(spec).expanduser()
    if path.is_dir():
        return
    if path.exists() or spec.startswith((".", "/", "~")) or not hub.is_hub_spec(spec):
        raise SpecdecError(
            f"{kind.what} not found: {spec}; give a {kind.noun} directory, a hub id or embedded"
        )


def resolve(
    spec: str,
    kind: FolderKind,
    check_config: Callable[[dict], object],
    progress: Progress | None,
    stop: StopFlag | None,
) -> tuple[Path, str]:
    """(the folder, the name messages use) of `spec`: the bundled one, a directory, or the hub
    snapshot of `owner/name[@revision]` (`check_config` runs on its config.json first)."""
    check_spec(spec, kind)
    if spec == "embedded":
        bundled = resource_path(kind.bundled)
        if not (bundled / CONFIG).is_file():
            raise SpecdecError(
                f"this install has no bundled {kind.what}; pass {kind.flag} DIR (train one with "
                f"{kind.train}) or a {kind.noun} hub id"
            )
        return bundled, f"the bundled {kind.what}"
    path = Path(spec).expanduser()
    if path.is_dir():
        return path, spec
    directory = hub.fetch(
        spec, what=kind.what, tokenizer=False, check_config=check_config, progress=progress,
        stop=stop,
    )  # fmt: skip
    return directory, spec


def read_config(directory: Path, name: str, kind: FolderKind) -> dict:
    """The folder's config.json as a JSON object, or one line saying what is wrong."""
    path = directory / CONFIG
    if not path.is_file():
        raise SpecdecError(f"{name} has no config.json; is it a {kind.noun} folder?")
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise SpecdecError(f"{path} is not valid JSON; copy the {kind.noun} again") from None
    if not isinstance(values, dict):
        raise SpecdecError(f"{path} is not a JSON object; copy the {kind.noun} again")
    return values

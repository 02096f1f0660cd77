"""Files shipped in resources/ (installed as the package `specdec_resources`).

The bundled EAGLE heads are named as `--head` takes them: `embedded` is resources/head, a head
it replaced stays loadable as `embedded-vN` from resources/head-vN, so the two can be compared
in one run (`--methods eagle2@embedded,eagle2@embedded-v1`), and `embedded-eagle3` is
resources/head-eagle3, an EAGLE-3 head for the embedded model (the layout vLLM serves as
`eagle3`; docs/serving.md).
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from specdec_core.errors import SpecdecError

HEAD = "embedded"  # the current bundled head's name
EAGLE3_HEAD = "embedded-eagle3"  # the bundled EAGLE-3 head's name (resources/head-eagle3)
_OLDER_HEAD = re.compile(r"embedded-v(\d+)")


def resource_path(*parts: str) -> Path:
    """A path inside the bundled resources, in a checkout or an installed wheel."""
    return Path(str(resources.files("specdec_resources").joinpath(*parts)))


def bundled_heads() -> dict[str, Path]:
    """The bundled heads present in this install, by name: `embedded`, `embedded-v1`, …,
    `embedded-eagle3`"""
    older = sorted(
        (int(match.group(1)), path.name)
        for path in resource_path().glob("head-v*")
        if (match := re.fullmatch(r"head-v(\d+)", path.name))
    )
    heads = {}
    named = [(HEAD, "head")] + [(f"embedded-v{n}", f) for n, f in older]
    for name, folder in [*named, (EAGLE3_HEAD, "head-eagle3")]:
        if (resource_path(folder) / "config.json").is_file():
            heads[name] = resource_path(folder)
    return heads


def names_bundled_head(spec: str) -> bool:
    """Is `spec` the name of a bundled head (present or not), rather than a folder or hub id?
    (A local folder called `embedded-v2` is then reached as `./embedded-v2`.)"""
    return spec in (HEAD, EAGLE3_HEAD) or _OLDER_HEAD.fullmatch(spec) is not None


def bundled_head(spec: str) -> Path:
    """The folder of the bundled head named `spec`; a SpecdecError that lists the bundled
    heads where this install has none by that name."""
    heads = bundled_heads()
    if spec in heads:
        return heads[spec]
    if spec == HEAD:
        raise SpecdecError(
            "this install has no bundled EAGLE head; pass --head DIR (train one with "
            "specdec train eagle) or an EAGLE head hub id"
        )
    known = ", ".join(heads) or "none"
    raise SpecdecError(
        f"this install has no bundled head named '{spec}' (bundled: {known}); pass one of "
        "those, a head folder or a hub id"
    )

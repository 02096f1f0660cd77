"""Files shipped in resources/ (installed as the package `specdec_resources`)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def resource_path(*parts: str) -> Path:
    """A path inside the bundled resources, in a checkout or an installed wheel."""
    return Path(str(resources.files("specdec_resources").joinpath(*parts)))

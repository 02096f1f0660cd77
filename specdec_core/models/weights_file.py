"""Reading a model's weight files, and naming its weights in a message, for every format reader.

`read_weight_file` reads one file: safetensors, or a pickled state dict through
`torch.load(weights_only=True)` (never arbitrary pickles). `read_weights` reads every weight
file of a directory (sharded or not), each checked whole first (checkpoint.check_weights).
`listed` names weights in a one-line message: the first six, then how many more;
`check_shapes` refuses the first weight whose shape is not the one its config gives.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors.torch import load_file

from specdec_core.errors import SpecdecError
from specdec_core.models.checkpoint import check_weights

SHOWN = 6  # weights named in a message before "and N more"


def read_weight_file(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of one weight file: safetensors by its suffix, else a pickled state dict."""
    if path.suffix == ".safetensors":
        return load_file(str(path))
    return torch.load(path, map_location="cpu", weights_only=True)


def read_weights(directory: Path, spec: str) -> dict[str, torch.Tensor]:
    """Every weight file of `directory` (sharded or not), checked whole before it is read;
    `spec` names the model in the message when one is missing or cut off."""
    state: dict[str, torch.Tensor] = {}
    for path in check_weights(directory, spec):
        state.update(read_weight_file(path))
    return state


def listed(names: Iterable[str]) -> str:
    """`names` for a message, in the order given: the first SHOWN, then how many more."""
    names = list(names)
    more = len(names) - SHOWN
    return ", ".join(names[:SHOWN]) + (f" and {more} more" if more > 0 else "")


def check_shapes(
    weights: Iterable[tuple[str, torch.Tensor, torch.Size]], whose: str, source: str, remedy: str
) -> None:
    """Refuse the first of `weights` (name as a message spells it, tensor, expected shape) whose
    shape differs: "{whose} {name} has shape [..] but {source} gives [..]; {remedy}"."""
    for name, value, shape in weights:
        if value.shape != shape:
            raise SpecdecError(
                f"{whose} {name} has shape {list(value.shape)} but {source} gives "
                f"{list(shape)}; {remedy}"
            )

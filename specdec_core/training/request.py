"""`TrainRequest`: every setting of one training run, checked when it is made (before a model
loads), so a run that cannot work is refused in a second, not after minutes of loading."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specdec_core.errors import SpecdecError
from specdec_core.training.common_request import TrainingData

TRAINS = ("eagle", "draft")
ARCHS = ("eagle1", "eagle3")


@dataclass(frozen=True)
class TrainRequest(TrainingData):
    """What to train and how (`trains` first, the rest by keyword); the defaults are `specdec
    train`'s."""

    trains: str  # eagle (an EAGLE head) | draft (a token-level draft)
    init: str | None = None  # eagle: the trained head to continue
    arch: str | None = None  # eagle: head layout, eagle1 | eagle3 (default: the init's, eagle1)
    layers: int | None = None  # eagle1: decoder layers (default: the init's, 1)
    draft_vocab: int | None = None  # None: the --init head's, else 8192; 0 = the full vocabulary
    unroll: int = 2  # eagle: draft steps simulated per position
    ce_weight: float | None = None  # default: the layout's (layout.layout_settings)
    noise: float | None = None  # eagle: uniform noise on input features (default: the layout's)
    input_norms: bool = False  # eagle3: EAGLE 3.1's RMSNorm per fused target state
    checkpoints: str | None = None  # directory of checkpoint.pt (default: out)
    progress_file: str | None = None  # progress as JSON, rewritten as training goes

    def __post_init__(self) -> None:
        if self.trains not in TRAINS:
            raise SpecdecError(f"cannot train '{self.trains}'; train eagle or draft")
        if self.arch not in (None, *ARCHS):
            raise SpecdecError(f"--arch {self.arch}: use eagle1 or eagle3")
        if self.input_norms and (self.arch != "eagle3" or self.init):
            raise SpecdecError(
                "--input-norms belongs to a fresh EAGLE-3 head; add --arch eagle3 (without --init)"
            )
        self.check_training_data()
        if self.trains == "draft":
            for flag, value, use in (
                ("--init", self.init, "continues an EAGLE head"),
                ("--arch", self.arch, "chooses an EAGLE head's layout"),
                ("--layers", self.layers, "sizes an EAGLE head"),
            ):
                if value is not None:
                    raise SpecdecError(f"{flag} {use}; drop it for `specdec train draft`")
        if self.layers is not None:
            check_depth(self.arch or "eagle1", self.layers)
        if self.arch == "eagle3" and not self.init and self.draft_vocab == 0:
            raise SpecdecError("an EAGLE-3 head needs a reduced draft vocabulary: --draft-vocab N")

    @property
    def checkpoint_dir(self) -> Path:
        return Path(self.checkpoints) if self.checkpoints else Path(self.out)


def check_depth(arch: str, layers: int) -> None:
    """Refuse a number of decoder layers the layout cannot have."""
    if arch == "eagle3" and layers != 1:
        raise SpecdecError(
            "an EAGLE-3 head has exactly one decoder layer (its midlayer); drop --layers, or "
            "use --arch eagle1 for a deeper head"
        )
    if layers < 1:
        raise SpecdecError(f"--layers {layers}: a head needs at least one decoder layer")

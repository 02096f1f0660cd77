"""The epochs of a small model trained on the target's features, checkpointed and resumable:
`EpochTraining`, and its pieces (`Checkpoint`, `Schedule`).

The features are computed as each batch needs them (online_features.py: `online_batches`, the
target's forward under no_grad, no feature files), so memory holds one batch whatever the
dataset's size. AdamW (0.9, 0.95, no weight decay) over shuffled length-grouped batches, a
linear warm-up then cosine decay (`Schedule`, over the epochs or the time budget, whichever
ends first; a resumed run's earlier training time added to both). Under a time budget the
decay's horizon is the time batches can start in (the budget less the mean batch time so far),
and a batch's rate is read where the next batch would start: after the batch itself and the
pause that follows it (the epoch's validation and save when it ends an epoch, a save every
`save_every` steps), each the mean of those measured so far in this run. So the last batch
before the budget ends runs at a rate near 0 however long the saves take (from the second
epoch on: the first epoch's end is not measured before it comes).

Checkpoints in OUT/checkpoint.pt (`Checkpoint`: the trained weights, the optimiser, the data
position (`online_features.Position`: the epoch and the batches taken in it) and the
input-feature noise's random state) every `save_every` steps and after each epoch; a rerun with
the same OUT resumes at the position saved, says so in one line, and ends with the weights of a
run that was never cut off; a checkpoint of other data or batches is refused. With a time
budget (`config.seconds`: this run's training time, features included) no batch starts that
would end after it by the batches' mean time so far (then it validates and saves as after an
epoch). Each epoch ends with `validate(model)`; `on_step(step, steps, steps_per_epoch,
history)` after every optimiser step and validation, `on_tick(clock)` after every batch and
every few seconds while one runs (time_budget.py), and a progress line on stderr every
`LOG_EVERY` batches. A subclass gives the checkpoint's `kind`, the gradient-norm `clip` and
`batch_loss`, the loss of one `FeatureBatch` (or its whole `step`).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import torch
from torch import nn

from specdec_core.errors import SpecdecError
from specdec_core.files import save_atomic
from specdec_core.models.loading import LoadedModel
from specdec_core.training.card import EpochRecord, Validation
from specdec_core.training.online_features import (
    FeatureBatch,
    Position,
    Sequences,
    batch_groups,
    online_batches,
)
from specdec_core.training.time_budget import HEARTBEAT_S, Budget, Heartbeat, StageClock
from specdec_core.training.train_config import TrainConfig

LOG_EVERY = 10  # batches between progress lines (the epoch's last batch is logged too)

# `on_step(step, steps, steps_per_epoch, history)`
OnStep = Callable[[int, int, int, list[EpochRecord]], None]
# `on_tick(clock)`: where training is, every few seconds and after every batch
OnTick = Callable[[StageClock], None]


class Checkpoint:
    """`directory/checkpoint.pt` of a run over `plan` (what a resumed run must share with it for
    its step count to mean the same: sequences, tokens, batch size)."""

    def __init__(self, directory: Path, plan: dict) -> None:
        self.path = directory / "checkpoint.pt"
        self.plan = plan

    def resume(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict | None:
        """Restore what was saved into `model`, `optimizer` and the feature noise; -> the run's
        state (None: nothing saved yet)."""
        if not self.path.is_file():
            return None
        saved = torch.load(self.path, weights_only=True, map_location="cpu")
        if saved["state"].get("plan", self.plan) != self.plan:
            raise SpecdecError(
                f"{self.path} is from a run on other data or batches ({saved['state']['plan']}; "
                f"this run: {self.plan}), so it cannot resume; use a new --out, or delete the "
                "checkpoint to start over (--init continues a finished head on new data)"
            )
        model.load_state_dict(saved["model"], strict=False)
        optimizer.load_state_dict(saved["optimizer"])
        set_noise_state(saved.get("noise"))
        return saved["state"]

    def save(
        self,
        model: nn.Module,
        trains: str,
        optimizer: torch.optim.Optimizer,
        state: dict,
    ) -> None:
        """Save the run (`state` holds its data position: the epoch and the step)."""
        own = model.state_dict()
        if trains == "draft":  # the target's embedding and lm_head are not its own
            own = {k: v for k, v in own.items() if "embed" not in k and "lm_head" not in k}
        record = {
            "model": own,
            "optimizer": optimizer.state_dict(),
            "noise": noise_state(),
            "state": state,
        }
        save_atomic(self.path, record)  # a run cut off mid-save keeps the last whole checkpoint


def noise_state() -> dict:
    """The random state the input-feature noise draws from (torch's default generators)."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_noise_state(state: dict | None) -> None:
    if state is None:  # a checkpoint from before the noise state was kept
        return
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Schedule:
    """Linear warm-up, then cosine decay over the steps or the time budget, whichever is ahead;
    `seconds_before`: training time a resumed run already spent. Under a time budget the decay
    ends `reserve` seconds before the budget does (the mean batch time: no batch starts later)."""

    def __init__(self, config: TrainConfig, total_steps: int, seconds_before: float) -> None:
        self.config, self.total = config, total_steps
        self.clock = time.monotonic() - seconds_before
        self.reserve = 0.0

    def seconds(self) -> float:
        """Training time so far, a resumed run's earlier time included."""
        return time.monotonic() - self.clock

    def done(self, step: int, ahead: float = 0.0) -> float:
        """Share of the schedule done: of the steps, or of the time batches can start in if
        that is ahead; `ahead`: seconds from now it is read at."""
        done = step / self.total
        if self.config.seconds:
            horizon = self.config.seconds - self.reserve
            time_done = (self.seconds() + ahead) / horizon if horizon > 0 else 1.0
            done = max(done, time_done)
        return min(1.0, done)

    def rate(self, step: int, ahead: float = 0.0) -> float:
        """The learning rate of optimiser step `step` + 1, read `ahead` seconds from now."""
        lr = self.config.lr * min(1.0, (step + 1) / self.config.warmup)
        return lr * (0.5 * (1 + math.cos(math.pi * self.done(step, ahead))))


def saved_plan(directory: Path) -> dict | None:
    """The plan (sequences, tokens, batch tokens) of the run whose checkpoint is in
    `directory`, or None without one: a resumed run trains on exactly that data."""
    path = directory / "checkpoint.pt"
    if not path.is_file():
        return None
    saved = torch.load(path, weights_only=True, map_location="cpu")
    return saved["state"].get("plan")


class EpochTraining:
    """One training run of `model` on `data` with the features of `target` (`layers`: the
    hidden states entering those layers too, an EAGLE-3 head's): the optimiser, the batch
    order, the checkpoint and the state saved in it (epoch, step, history as
    `EpochRecord.to_record()`s, plan, seconds; `out_of_time` once the budget ended it)."""

    kind: ClassVar[str]  # what the checkpoint holds (Checkpoint.save)
    clip: ClassVar[float]  # the gradient norm each step is clipped to

    def __init__(
        self,
        model: nn.Module,
        target: LoadedModel,
        data: Sequences,
        layers: tuple[int, ...],
        config: TrainConfig,
        out: Path,
        validate: Callable[[nn.Module], Validation] | None = None,
        on_step: OnStep | None = None,
        on_tick: OnTick | None = None,
    ) -> None:
        self.model, self.data, self.config, self.validate = model, data, config, validate
        self.target, self.layers = target, layers
        self.on_step, self.on_tick = on_step, on_tick
        self.params = self.trained_parameters()
        self.optimizer = torch.optim.AdamW(
            self.params, lr=config.lr, betas=(0.9, 0.95), weight_decay=0.0
        )
        self.steps_per_epoch = len(batch_groups(data, config.batch_tokens))
        self.total = max(1, self.steps_per_epoch * config.epochs)
        plan = {"sequences": len(data), "tokens": data.tokens, "batch_tokens": config.batch_tokens}
        self.checkpoint = Checkpoint(out, plan)
        resumed = self.checkpoint.resume(self.saved, self.optimizer)
        self.state = resumed or {"epoch": 0, "step": 0, "history": [], "plan": plan}
        if resumed:
            at = self.position()
            _log(
                f"resuming from {self.checkpoint.path}: step {self.state['step']} of "
                f"{self.total}, epoch {at.epoch + 1} batch {at.batch}/{self.steps_per_epoch}"
            )
        before = self.state.get("seconds", 0.0)  # a resumed run's earlier training time
        timed = replace(config, seconds=before + config.seconds) if config.seconds else config
        self.schedule = Schedule(timed, self.total, before)
        self.deadline = time.monotonic() + config.seconds if config.seconds else None
        self.batch_seconds: list[float] = []  # this run's batches
        self.epoch_end_seconds: list[float] = []  # this run's ends of epochs (validation, save)
        self.save_seconds: list[float] = []  # this run's saves every `save_every` steps
        self.tokens_per_step = plan["tokens"] / max(1, self.steps_per_epoch)
        self.clock = StageClock(
            "training",
            round(plan["tokens"] * config.epochs),
            Budget(config.seconds or None),
            done=round(self.state["step"] * self.tokens_per_step),  # a resumed run's steps
        )

    @property
    def saved(self) -> nn.Module:
        """The module whose weights the checkpoint holds."""
        return self.model

    def trained_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def position(self) -> Position:
        """Where the data stream is: the epoch and the batches of it already trained on."""
        state = self.state
        return Position(state["epoch"], state["step"] - state["epoch"] * self.steps_per_epoch)

    def batch_loss(self, batch: FeatureBatch) -> tuple[torch.Tensor, str]:
        """One batch's loss to minimise, and what to say of it in the progress line."""
        raise NotImplementedError

    def step(self, batch: FeatureBatch) -> str:
        """One optimiser step on a batch; -> what the progress line says of it."""
        loss, said = self.batch_loss(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.optimizer.step()
        return f"loss {float(loss.detach()):.3f}; {said}"

    def run(self) -> list[EpochRecord]:
        state = self.state
        with Heartbeat(self.tick, HEARTBEAT_S):
            while state["epoch"] < self.config.epochs and not state.get("out_of_time"):
                self.epoch()
                began = time.monotonic()
                self.end_epoch()
                self.epoch_end_seconds.append(time.monotonic() - began)
        return self.history()

    def history(self) -> list[EpochRecord]:
        return [EpochRecord.from_record(record) for record in self.state["history"]]

    def tick(self) -> None:
        if self.on_tick is not None:
            self.on_tick(self.clock)

    def _out_of_time(self) -> bool:
        """No time for the next batch: the schedule is done, or the batch would end after this
        run's budget by the mean batch time so far (the first batch always runs)."""
        if not self.config.seconds:
            return False
        if self.schedule.done(self.state["step"]) >= 1.0:
            return True
        if self.deadline is None or not self.batch_seconds:
            return False
        mean = sum(self.batch_seconds) / len(self.batch_seconds)
        return time.monotonic() + mean > self.deadline

    def until_next_batch(self, ends_epoch: bool, saves: bool) -> float:
        """Seconds expected from now until the batch after the one about to run can start: a
        batch's mean time so far, then the mean end of an epoch so far if it ends one and the
        mean save so far if a save follows it."""
        seconds = 0.0
        for follows, measured in (
            (True, self.batch_seconds),
            (ends_epoch, self.epoch_end_seconds),
            (saves, self.save_seconds),
        ):
            if follows and measured:
                seconds += sum(measured) / len(measured)
        return seconds

    def epoch(self) -> None:
        """The epoch's batches from where the state stands (mid-epoch after a resume)."""
        state, config = self.state, self.config
        at = self.position()
        stream = online_batches(
            self.target, self.data, self.layers, config.batch_tokens, config.seed,
            start=at, epochs=at.epoch + 1,
        )  # fmt: skip
        self.model.train()
        for number in range(at.batch + 1, self.steps_per_epoch + 1):
            if self._out_of_time():
                state["out_of_time"] = True
                break
            saves = (state["step"] + 1) % config.save_every == 0
            ahead = self.until_next_batch(number == self.steps_per_epoch, saves)
            for group in self.optimizer.param_groups:  # read where the next batch would start
                group["lr"] = self.schedule.rate(state["step"], ahead)
            self.clock.begin_unit(
                f"epoch {state['epoch'] + 1}, batch {number}/{self.steps_per_epoch}"
            )
            began = time.monotonic()
            said = self.step(next(stream))  # the target's forward for it, then the step
            self.batch_seconds.append(time.monotonic() - began)
            self.schedule.reserve = sum(self.batch_seconds) / len(self.batch_seconds)
            state["step"] += 1
            self.clock.advance(round(state["step"] * self.tokens_per_step))
            self.clock.note = ""
            self.tick()
            state["seconds"] = self.schedule.seconds()
            if number % LOG_EVERY == 0 or number == self.steps_per_epoch:
                _log(f"epoch {state['epoch'] + 1} batch {number}/{self.steps_per_epoch}: {said}")
            if state["step"] % config.save_every == 0:
                saving = time.monotonic()
                self.save()
                self.save_seconds.append(time.monotonic() - saving)
            self.stepped()

    def end_epoch(self) -> None:
        """The epoch's record (a fraction of one where the time ran out), validated, printed
        as a JSON line and saved."""
        state = self.state
        stopped = "time" if state.get("out_of_time") else None
        if stopped:  # epochs done so far, as a fraction
            epoch = round(state["step"] / self.steps_per_epoch, 2)
        else:
            state["epoch"] += 1
            epoch = state["epoch"]
        ended = time.time()
        validation = Validation()
        if self.validate is not None:
            self.model.eval()
            self.clock.begin_unit("validation")
            validation = self.validate(self.model)
            self.clock.note = ""
        record = EpochRecord(epoch, state["step"], ended, validation, stopped).to_record()
        state["history"].append(record)
        print(json.dumps(record), flush=True)
        self.save()
        self.stepped()

    def stepped(self) -> None:
        if self.on_step is not None:
            steps = self.state["step"], self.total, self.steps_per_epoch
            self.on_step(*steps, self.history())

    def save(self) -> None:
        self.checkpoint.save(self.saved, self.kind, self.optimizer, self.state)


def _log(message: str) -> None:
    print(f"[train] {message}", file=sys.stderr, flush=True)

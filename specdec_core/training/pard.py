"""`specdec train pard`: adapt a draft model into a PARD parallel draft (drafters/pard.py).

PARD's recipe (AMD-AGI/PARD `pard/pard_train.py`; An et al. 2025), as written here:

- **Start** from an autoregressive draft of the target's tokenizer (`--init SPEC`), or, where
  the target's family has none smaller, from a copy of the target's first `--layers` decoder
  layers with its final norm and (tied) lm_head. Every weight trains.
- **Mask token**: one id of the tokenizer that the text never contains (PARD takes a reserved
  token: 128020 in Llama 3, 151665 in Qwen2.5); here the highest special token id absent from
  the training data and without a role (not BOS, EOS or padding), unless `--mask-token ID`
  names one.
  It is written into config.json as `pard_token` (and `spd_type: "pard"`), as PARD's trainer
  does, so the playground and vLLM read it.
- **Objective**: each training text of length L is laid out as `block` copies: copy 0 the
  text itself, copy i (1 <= i < block) the mask token at every position. Position p of copy i
  has position id p and sees the real tokens 0..p - i and, of each copy j in 1..i, position
  p - i + j: exactly what the drafter feeds at inference (the committed tokens up to p - i,
  then i masks). Each query predicts the token at p + 1 (cross-entropy on the text, prompt
  included, as PARD's plain language-model collator). Copy 0 is ordinary next-token training,
  so the draft stays a draft. One difference: PARD also trains the first i - 1 positions of
  copy i, where a query sees masks and no real token, a case inference never meets; here
  they are left out.
- **COD, conditional drop-token**: copy i keeps a random share max(drop^i, drop_min) of its
  positions (PARD: 0.7 and 0.2), each chosen among those whose predecessor in copy i - 1 is
  kept (the chain it attends to stays whole); about 3.4 L rows per text instead of block x L.

The trainer reads a `specdec data` job folder (the target's own answers: resources/corpus/
embedded for the embedded model), trains one text per forward and steps the optimiser every
`batch_tokens` text tokens (AdamW, linear warm-up then linear decay, clipped gradients), and
reports each block position's teacher-forced top-1 accuracy on held-out texts before and after
(`top1_by_position`: position 0 is the pending token's row, position i the i-th mask's). It
saves a whole checkpoint (config.json with `pard_token`, model.safetensors, the target's
tokenizer) and `specdec_card.json`. It trains in one go: an interrupted run starts over.
"""

from __future__ import annotations

import copy
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

from specdec_core.drafters.classic import tokenizers_match
from specdec_core.errors import SpecdecError
from specdec_core.heads.pard import PARD_TOKEN
from specdec_core.models.loading import LoadedModel, load_model
from specdec_core.run.runner import load_draft
from specdec_core.training.card import CARD
from specdec_core.training.generation_job import load_samples

IGNORE = -100  # a row without a label
DROP, DROP_MIN = 0.7, 0.2  # PARD's COD settings (its example configs)
WARMUP = 0.05  # share of the steps the learning rate warms up over


@dataclass(frozen=True)
class PardTrainRequest:
    """What `specdec train pard` trains: checked before any model loads."""

    out: str
    data: str  # a `specdec data` job folder
    target: str = "embedded"
    init: str | None = None  # an autoregressive draft to adapt; None: the target's first layers
    layers: int = 4  # with init None: the target's first layers the draft keeps
    block: int = 8  # k the draft learns: copies of the text (PARD's para_num)
    mask_token: int | None = None  # None: the highest special id absent from the data
    tokens: int | None = None  # text tokens read from the corpus (None: all)
    epochs: int = 1
    lr: float = 1e-4
    batch_tokens: int = 4096  # text tokens per optimiser step
    max_len: int = 512
    drop: float = DROP
    drop_min: float = DROP_MIN
    seed: int = 0
    seconds: float | None = None  # time budget for training (validation after it)
    held_out: int = 16  # texts kept for validation
    device: str = "cpu"
    command: str = ""

    def __post_init__(self) -> None:
        if self.block < 2:
            raise SpecdecError(f"--block {self.block}: a parallel draft learns at least 2 tokens")
        if self.init is None and self.layers < 1:
            raise SpecdecError(f"--layers {self.layers}: the draft keeps at least one layer")
        if not 0 < self.drop <= 1 or not 0 <= self.drop_min <= 1:
            raise SpecdecError("COD shares are in (0, 1]: drop and drop_min")
        if not Path(self.data, "job.json").is_file():
            raise SpecdecError(
                f"--data {self.data}: PARD trains on a `specdec data` job folder (its job.json "
                "and shards), e.g. resources/corpus/embedded"
            )


@dataclass(frozen=True)
class Layout:
    """One text laid out as PARD trains it: the rows of every kept copy, their attention."""

    input_ids: torch.Tensor  # [N]
    position_ids: torch.Tensor  # [N]
    mask: torch.Tensor  # [N, N] bool: query row -> key rows it sees
    labels: torch.Tensor  # [N], IGNORE where none
    copy: torch.Tensor  # [N] the block position each row drafts (0: the real token's)


def kept_positions(
    length: int, block: int, drop: float, drop_min: float, rng: random.Random
) -> list[list[int]]:
    """The positions of each copy a text of `length` keeps: copy 0 all; copy i a share
    max(drop^i, drop_min) of its positions, among those whose predecessor copy i - 1 kept and
    which see a real token and have a label (i <= p <= length - 2); drop 1 keeps them all."""
    kept = [list(range(length))]
    for i in range(1, block):
        candidates = [p + 1 for p in kept[-1] if i <= p + 1 <= length - 2]
        count = min(len(candidates), int(length * max(drop**i, drop_min)))
        if count == 0:
            break
        kept.append(sorted(rng.sample(candidates, count)))
    return kept


def layout(ids: Sequence[int], mask_token: int, kept: list[list[int]]) -> Layout:
    """The rows of `kept` (copy -> positions) for the text `ids` (see the module docstring)."""
    copies = torch.tensor([i for i, positions in enumerate(kept) for _ in positions])
    positions = torch.tensor([p for positions in kept for p in positions])
    text = torch.tensor(list(ids))
    input_ids = torch.where(copies == 0, text[positions], torch.full_like(positions, mask_token))
    following = torch.cat([text[1:], torch.tensor([IGNORE])])
    labels = following[positions]
    base = positions - copies  # the last real token each row sees
    real_key = (copies == 0)[None, :] & (positions[None, :] <= base[:, None])
    mask_key = (
        (copies > 0)[None, :]
        & (copies[None, :] <= copies[:, None])
        & (base[None, :] == base[:, None])
    )
    return Layout(input_ids, positions, real_key | mask_key, labels, copies)


def block_loss(model: PreTrainedModel, rows: Layout) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean cross-entropy over the labelled rows, their logits' argmax == label) of one
    forward over `rows`."""
    device = model.device
    out = model(
        input_ids=rows.input_ids[None].to(device),
        position_ids=rows.position_ids[None].to(device),
        attention_mask=rows.mask[None, None].to(device),
        use_cache=False,
    )
    labelled = rows.labels != IGNORE
    logits = out.logits[0][labelled.to(device)].float()
    labels = rows.labels[labelled].to(device)
    loss = torch.nn.functional.cross_entropy(logits, labels)
    return loss, (logits.argmax(-1) == labels).cpu()


def top1_by_position(
    model: PreTrainedModel, texts: Sequence[Sequence[int]], mask_token: int, block: int
) -> list[float]:
    """Teacher-forced top-1 accuracy of each block position on `texts`, every position kept."""
    hits, counts = torch.zeros(block), torch.zeros(block)
    rng = random.Random(0)
    with torch.no_grad():
        for ids in texts:
            rows = layout(ids, mask_token, kept_positions(len(ids), block, 1.0, 1.0, rng))
            _, right = block_loss(model, rows)
            copies = rows.copy[rows.labels != IGNORE]
            hits += torch.bincount(copies, right.float(), minlength=block)[:block]
            counts += torch.bincount(copies, minlength=block)[:block].float()
    return [round(float(h / c), 4) if c else 0.0 for h, c in zip(hits, counts, strict=True)]


def plain_copy(model: PreTrainedModel, layers: int | None = None) -> PreTrainedModel:
    """A float32 copy of `model` with weights of its own, built from its config (none of the
    inference paths a loaded model runs through); with `layers`, only its first `layers`
    decoder layers, its final norm and lm_head kept."""
    config = copy.deepcopy(model.config)
    if layers is not None:
        total = config.num_hidden_layers
        if layers >= total:
            raise SpecdecError(f"--layers {layers}: the target has {total}; a draft keeps fewer")
        config.num_hidden_layers = layers
        if getattr(config, "layer_types", None) is not None:
            config.layer_types = config.layer_types[:layers]
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = {
        name: value.detach().clone().float()
        for name, value in model.state_dict().items()
        if layers is None
        or not name.startswith("model.layers.")
        or int(name.split(".")[2]) < layers
    }
    fresh.load_state_dict(state, strict=False)
    fresh.tie_weights()
    return fresh


def mask_token_for(tokenizer, texts: Sequence[Sequence[int]], vocab: int) -> int:
    """The highest special token id of `tokenizer` that `texts` never contain and that has no
    role of its own (not its BOS, EOS or padding token): PARD takes a reserved token the text
    never holds."""
    roles = {tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id}
    seen = {i for ids in texts for i in ids} | roles
    special = sorted(i for i in tokenizer.added_tokens_decoder if i < vocab and i not in seen)
    if not special:
        raise SpecdecError(
            "every special token of the tokenizer occurs in the data or has a role (BOS, EOS, "
            "padding), so none can stand for a masked token; give one with --mask-token ID (an "
            "id the text never holds)"
        )
    return special[-1]


@dataclass
class PardCard:
    """`specdec_card.json` of a trained PARD draft."""

    target: str
    start: str
    mask_token: int
    block: int
    texts: int
    tokens: int
    steps: int
    seconds: float
    top1_before: list[float]
    top1_by_position: list[float]
    losses: list[float] = field(default_factory=list)  # mean loss per logged stretch
    command: str = ""
    kind: str = "pard"
    stopped: str | None = None  # "time" where the time budget ended training

    def to_record(self) -> dict:
        return asdict(self)


def train_pard(request: PardTrainRequest, log: Callable[[str], None] = print) -> PardCard:
    """Train the PARD draft `request` asks for; save it in `request.out`; -> its card."""
    torch.manual_seed(request.seed)
    rng = random.Random(request.seed)
    samples, _ = load_samples(Path(request.data), request.tokens)
    texts = [list(s.ids[: request.max_len]) for s in samples if len(s.ids) >= 3]
    if len(texts) <= request.held_out:
        raise SpecdecError(
            f"--data {request.data} holds {len(texts)} texts; PARD needs more than the "
            f"{request.held_out} it holds out (raise --tokens, or let the data job run longer)"
        )
    rng.shuffle(texts)
    held, train = texts[: request.held_out], texts[request.held_out :]
    target = load_model(request.target, device=request.device, dtype="float32")
    draft, start = _starting_draft(request, target)
    vocab = int(draft.get_input_embeddings().weight.shape[0])
    mask = (
        request.mask_token
        if request.mask_token is not None
        else mask_token_for(target.tokenizer, texts, vocab)
    )
    if not 0 <= mask < vocab:
        raise SpecdecError(f"--mask-token {mask}: outside the draft's {vocab}-token embedding")
    tokenizer = target.tokenizer
    del target
    log(f"pard: {start}, mask token {mask}, {len(train)} texts, {len(held)} held out")
    before = top1_by_position(draft.eval(), held, mask, request.block)
    log(f"pard: top-1 by block position before: {before}")
    card = _train(draft, train, mask, request, rng, log)
    after = top1_by_position(draft.eval(), held, mask, request.block)
    log(f"pard: top-1 by block position after: {after}")
    card = PardCard(
        target=request.target,
        start=start,
        mask_token=mask,
        block=request.block,
        texts=len(train),
        tokens=sum(len(t) for t in train),
        top1_before=before,
        top1_by_position=after,
        command=request.command,
        **card,
    )
    _save(draft, tokenizer, request, mask, card)
    return card


def _starting_draft(request: PardTrainRequest, target: LoadedModel) -> tuple[PreTrainedModel, str]:
    """(the draft to adapt, in float32 with weights of its own, where it came from)."""
    if request.init is None:
        return plain_copy(
            target.model, request.layers
        ), f"the target's first {request.layers} layers"
    loaded = load_draft(request.init, target)
    if not tokenizers_match(target.tokenizer, loaded.tokenizer):
        raise SpecdecError(
            f"--init {request.init}: a PARD draft drafts the target's token ids, so it starts "
            "from a draft of the target's tokenizer"
        )
    return plain_copy(loaded.model), f"the draft {request.init}"


def _train(
    draft: PreTrainedModel,
    texts: list[list[int]],
    mask: int,
    request: PardTrainRequest,
    rng: random.Random,
    log: Callable[[str], None],
) -> dict:
    per_epoch = sum(len(t) for t in texts)
    steps = max(1, math.ceil(per_epoch * request.epochs / request.batch_tokens))
    warmup = max(1, int(steps * WARMUP))
    optimizer = torch.optim.AdamW(draft.parameters(), lr=request.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / max(1, steps - warmup))),
    )
    draft.train()
    started, step, taken, stopped = time.monotonic(), 0, 0, None
    losses, stretch = [], []
    for _ in range(request.epochs):
        order = list(range(len(texts)))
        rng.shuffle(order)
        for index in order:
            ids = texts[index]
            kept = kept_positions(len(ids), request.block, request.drop, request.drop_min, rng)
            loss, _ = block_loss(draft, layout(ids, mask, kept))
            (loss * len(ids) / request.batch_tokens).backward()
            stretch.append(float(loss.detach()))
            taken += len(ids)
            if request.seconds is not None and time.monotonic() - started > request.seconds:
                stopped = "time"  # checked after every text: a step may take minutes on a CPU
                break
            if taken < request.batch_tokens:
                continue
            torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            step, taken = step + 1, 0
            if step % 10 == 0 or step == steps:
                losses.append(round(sum(stretch) / len(stretch), 4))
                stretch = []
                log(f"pard: step {step}/{steps}, loss {losses[-1]}")
        if stopped:
            break
    if stretch:
        losses.append(round(sum(stretch) / len(stretch), 4))
    return {"steps": step, "seconds": round(time.monotonic() - started, 1), "losses": losses,
            "stopped": stopped}  # fmt: skip


def _save(draft: PreTrainedModel, tokenizer, request: PardTrainRequest, mask: int, card: PardCard):
    out = Path(request.out)
    out.mkdir(parents=True, exist_ok=True)
    setattr(draft.config, PARD_TOKEN, mask)
    draft.config.spd_type = "pard"
    draft.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / CARD).write_text(json.dumps(card.to_record(), indent=2) + "\n")
    AutoConfig.from_pretrained(out)  # reads back: a config.json vLLM and transformers load

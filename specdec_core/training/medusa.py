"""`specdec train medusa`: Medusa-1 heads for any target, on the pipeline EAGLE training uses.

Data and features are `specdec train`'s: the `--data` sources (data_sources.py, a `specdec
data` job included), the target's final-norm hidden states per position, computed batch by
batch as training needs them (online_features.py), batches, the learning-rate schedule and the
resumable checkpoint of common_training.py, the held-out prompts per kind of validation.py and
the model card of card.py.

The objective is EAGLE training's (objective.py): cross-entropy against the target's own
distribution over the draft vocabulary. Head i at position t reads the feature h_t and learns
the target's distribution of token t + i + 2, softmax(lm_head(h_{t+i+1})) over the draft
vocabulary's rows; its loss counts where h_{t+i+1} is past the sample's start (the answer), and
head i's loss is weighted 0.8^i (Medusa-1's λ_i). The heads start as Medusa's do: blocks at
zero (the identity), every lm head a copy of the target's lm_head rows of the draft vocabulary
(its `draft_vocab` most frequent tokens of the data, as EAGLE heads; 0: the whole vocabulary).
With `lm_head` "target" the heads share one lm head, those rows, which training keeps as they
are (vLLM's `original_lm_head`): only the blocks learn, and the saved file is small.

Heads over the whole vocabulary are saved in FasterDecoding's layout; heads over a reduced
vocabulary in vLLM's (its token_map holds the vocabulary; FasterDecoding's layout has none),
both read by medusa/formats.py. Teacher-forced top-1 is per head against the target's argmax;
tau is greedy decoding of held-out prompts with a VALIDATION_TREE-token Medusa tree.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from specdec_core.errors import SpecdecError
from specdec_core.heads.medusa.formats import MEDUSA_FILES, export_vllm, save_fasterdecoding
from specdec_core.heads.medusa.head import MedusaConfig, MedusaHeads
from specdec_core.models.loading import LoadedModel
from specdec_core.models.prepacked_linear import fast_bf16
from specdec_core.training.card import ModelCard, Validation
from specdec_core.training.common_request import TrainingData
from specdec_core.training.common_training import EpochTraining, OnStep
from specdec_core.training.online_features import FeatureBatch, Sequences
from specdec_core.training.progress_file import ProgressFile
from specdec_core.training.starting_model import frequent_tokens
from specdec_core.training.time_budget import Budget
from specdec_core.training.train_config import TrainConfig
from specdec_core.training.training_set import collect_samples, log, run_card
from specdec_core.training.validation import by_kind_table, held_features

HEAD_DECAY = 0.8  # head i's loss weight is HEAD_DECAY ** i (Medusa-1)
DRAFT_VOCAB = 8192  # default draft vocabulary, as EAGLE heads trained here
VALIDATION_TREE = 16  # tree tokens of the validation tau
LM_HEADS = ("own", "target")  # each head's own trained lm head | the target's rows, shared


@dataclass(frozen=True, kw_only=True)
class MedusaTrainRequest(TrainingData):
    """What to train and how; the defaults are `specdec train medusa`'s. Checked when made."""

    heads: int = 4
    layers: int = 1  # residual blocks per head
    lm_head: str = "own"  # own: each head trains its lm head; target: the target's, shared
    draft_vocab: int | None = None  # None: DRAFT_VOCAB; 0: the target's whole vocabulary
    progress_file: str | None = None  # progress as JSON, rewritten as training goes

    def __post_init__(self) -> None:
        self.check_training_data()
        if self.heads < 1:
            raise SpecdecError(f"--heads {self.heads}: Medusa needs at least one head")
        if self.layers < 1:
            raise SpecdecError(f"--layers {self.layers}: a Medusa head needs a residual block")
        if self.lm_head not in LM_HEADS:
            raise SpecdecError(f"--lm-head {self.lm_head}: use own or target")
        if self.draft_vocab is not None and self.draft_vocab < 0:
            raise SpecdecError(f"--draft-vocab {self.draft_vocab}: give 0 (all) or more tokens")


def starting_heads(
    target: LoadedModel,
    data: Sequences,
    heads: int,
    layers: int,
    draft_vocab: int,
    shared: bool = False,
) -> MedusaHeads:
    """Fresh heads in float32 on the target's device: blocks at zero, lm heads the target's
    lm_head rows of the `draft_vocab` most frequent tokens of `data` (0: every token); with
    `shared`, one lm head for every head (vLLM's original_lm_head), which training keeps."""
    lm = target.model.get_output_embeddings().weight
    vocab, hidden = lm.shape
    size = min(draft_vocab or vocab, vocab)
    token_map = frequent_tokens(data, size, vocab) if size < vocab else None
    reduced = size if size < vocab else 0
    config = MedusaConfig(hidden, vocab, heads, layers, draft_vocab=reduced, shared_lm_head=shared)
    medusa = MedusaHeads(config, token_map).float()
    with torch.no_grad():
        for block in medusa.blocks:
            for res in block:
                res.linear.weight.zero_()
                res.linear.bias.zero_()
        rows = lm.detach().float().cpu()[token_map if token_map is not None else slice(None)]
        for head in medusa.lm_heads:
            head.weight.copy_(rows)
    return medusa.to(target.device)


def medusa_losses(
    heads: MedusaHeads, lm_rows: torch.Tensor, ids, hidden, mask
) -> tuple[torch.Tensor, list[float], list[float]]:
    """One batch: the weighted loss, and per head its cross-entropy and its top-1 agreement
    with the target over the draft vocabulary (see the module docstring). `lm_rows` [Vd, h]:
    the target's lm_head rows of the draft vocabulary."""
    x = hidden.float()  # [B, T, h]
    with torch.no_grad():
        teacher = torch.softmax(x @ lm_rows.T, dim=-1)  # [B, T, Vd]
    total = x.new_zeros(())
    ces, agrees = [], []
    for i in range(heads.num_heads):
        n = x.shape[1] - i - 1
        keep = mask[:, i + 1 :] if n > 0 else None  # the teacher's position t + i + 1
        if keep is None or not keep.any():
            ces.append(float("nan"))
            agrees.append(float("nan"))
            continue
        logits = heads.head_logits(i, x[:, :n][keep]).float()  # [N, Vd]
        p = teacher[:, i + 1 :][keep]  # [N, Vd]
        ce = -(p * torch.log_softmax(logits, dim=-1)).sum(-1).mean()
        total = total + HEAD_DECAY**i * ce
        ces.append(float(ce.detach()))
        agrees.append(float((logits.argmax(-1) == p.argmax(-1)).float().mean()))
    return total, ces, agrees


@torch.no_grad()
def teacher_forced_top1(heads: MedusaHeads, data: list[FeatureBatch], lm_head) -> list[float]:
    """Per head, the share of held-out answer positions t where the head's top-1 (a target id)
    equals the target's argmax for token t + i + 2 (over its whole vocabulary)."""
    device = lm_head.weight.device
    draft_ids = heads.draft_ids().to(device)
    hits = [0] * heads.num_heads
    totals = [0] * heads.num_heads
    dtype = heads.lm_heads[0].weight.dtype
    for batch in data:
        x = batch.hidden.to(device, lm_head.weight.dtype)  # [B, T, h]
        mask = batch.loss_mask.to(device)
        truth = lm_head(x).argmax(-1)  # [B, T]: the target's token after each position
        for i in range(heads.num_heads):
            n = x.shape[1] - i - 1
            if n <= 0:
                continue
            keep = mask[:, i + 1 :]
            guess = draft_ids[heads.head_logits(i, x[:, :n][keep].to(dtype)).argmax(-1)]
            hits[i] += int((guess == truth[:, i + 1 :][keep]).sum())
            totals[i] += int(keep.sum())
    return [round(h / max(1, t), 4) for h, t in zip(hits, totals, strict=True)]


@torch.no_grad()
def medusa_tau(heads: MedusaHeads, target: LoadedModel, prompts: list[list[int]]) -> float:
    """Mean acceptance length of greedy decoding of `prompts` (48 new tokens each) with a
    VALIDATION_TREE-token Medusa tree."""
    from specdec_core.decoding.config import DecodeConfig
    from specdec_core.drafters.medusa import MedusaDrafter
    from specdec_core.training.validation import decoded_tau

    heads.eval()
    config = DecodeConfig(max_new_tokens=48, tree_tokens=VALIDATION_TREE)
    tau = decoded_tau(target, MedusaDrafter(heads, target.model), prompts, config)
    heads.train()
    return round(tau, 3)


def train_medusa(request: MedusaTrainRequest) -> ModelCard:
    """`specdec train medusa`: load the target, collect the data, train, save; -> the card."""
    started = time.time()
    target = request.load_target()
    return train_medusa_on(request, target, request.collected(target), started)


def train_medusa_on(
    request: MedusaTrainRequest, target: LoadedModel, sources, started: float | None = None
) -> ModelCard:
    """Train `request`'s heads on `sources` (`Collected`, in order) and save them with their
    card in `request.out`; -> the card."""
    began, started = time.monotonic(), started or time.time()
    target.model.requires_grad_(False)
    out = Path(request.out)
    budget = Budget(None)  # `seconds` bounds training alone
    data = collect_samples(sources, request.data, budget, request.batch_tokens)
    if not len(data.train):
        raise SpecdecError("no training data; check --data and --tokens")
    size = DRAFT_VOCAB if request.draft_vocab is None else request.draft_vocab
    shared = request.lm_head == "target"
    heads = starting_heads(target, data.train, request.heads, request.layers, size, shared)
    if shared:  # the target's own rows: not trained
        heads.lm_heads.requires_grad_(False)
    params = sum(p.numel() for p in heads.parameters() if p.requires_grad)
    log(f"{request.heads} Medusa heads: {params / 1e6:.1f}M trained parameters")
    config = TrainConfig(
        trains="medusa", epochs=request.epochs, lr=request.lr, batch_tokens=request.batch_tokens,
        draft_vocab=heads.config.rows, noise=0.0, ce_weight=1.0, unroll=1, arch="medusa1",
        seed=request.seed, save_every=request.save_every,
    )  # fmt: skip
    if request.seconds:
        config.seconds = max(1.0, request.seconds - (time.monotonic() - began))
    out.mkdir(parents=True, exist_ok=True)
    lm_head = target.model.get_output_embeddings()
    held = held_features(target, data.held)

    def validate(model: MedusaHeads) -> Validation:
        top1 = teacher_forced_top1(model, held, lm_head) if held else [None]
        tau = None
        if data.held_prompts and request.val_prompts:
            tau = medusa_tau(model, target, data.held_prompts[: request.val_prompts])
        result = Validation(top1[0], tau)
        save_medusa(model, out, request.target, ModelCard(kind="medusa", partial=result))
        return result

    tokens = data.tokens
    progress = ProgressFile(Path(request.progress_file), tokens) if request.progress_file else None
    history = MedusaTraining(
        heads, target, data.train, config, out, validate, progress.update if progress else None
    ).run()
    if progress is not None:
        progress.finish(history)
    by_kind = None
    if request.val_kinds:

        def measure(prompts: list[list[int]], featured: list[FeatureBatch]) -> Validation:
            return Validation(
                teacher_forced_top1(heads, featured, lm_head)[0],
                medusa_tau(heads, target, prompts),
            )

        by_kind = by_kind_table(target, request.work_dir, request.val_kinds, (), measure)
    per_head = teacher_forced_top1(heads, held, lm_head) if held else []
    card = run_card(
        request, "medusa", data, history, started, target,
        draft_vocab=heads.config.rows,
        layers=request.layers,
        train_config=config,
        validation_by_kind=by_kind,
        extra={
            "medusa": {
                "heads": request.heads,
                "layers": request.layers,
                "lm_head": request.lm_head,
                "layout": "fasterdecoding" if heads.token_map is None else "vllm",
                "head_loss_decay": HEAD_DECAY,
                "teacher_forced_top1_by_head": per_head,
                "validation_tree_tokens": VALIDATION_TREE,
            }
        },
    )  # fmt: skip
    save_medusa(heads, out, request.target, card)
    log(f"saved the Medusa heads to {out}")
    return card


def save_medusa(heads: MedusaHeads, out: Path, target: str, card: ModelCard) -> None:
    """FasterDecoding's layout for whole-vocabulary heads, vLLM's for a reduced vocabulary
    (float16), with the card; files of the other layout left from an earlier save go."""
    record = card.to_record()
    if heads.token_map is None:
        (out / "model.safetensors").unlink(missing_ok=True)
        save_fasterdecoding(heads, out, target, record, torch.float16)
    else:
        for name in MEDUSA_FILES:
            (out / name).unlink(missing_ok=True)
        export_vllm(heads, out, record, torch.float16)


class MedusaTraining(EpochTraining):
    """Medusa heads' epochs (common_training.EpochTraining) on `medusa_losses`, on `target`'s
    final-norm features; its lm_head's draft-vocabulary rows are the teacher."""

    kind = "medusa"
    clip = 0.5

    def __init__(
        self,
        heads: MedusaHeads,
        target: LoadedModel,
        data: Sequences,
        config: TrainConfig,
        out: Path,
        validate: Callable[[MedusaHeads], Validation] | None = None,
        on_step: OnStep | None = None,
    ) -> None:
        lm_head = target.model.get_output_embeddings()
        device = lm_head.weight.device
        draft_ids = heads.draft_ids().to(device)
        self.heads = heads
        self.lm_rows = lm_head.weight[draft_ids].detach().float()  # [Vd, h]
        self.autocast = device.type == "cuda" or fast_bf16(device)
        super().__init__(heads, target, data, (), config, out, validate, on_step)

    def batch_loss(self, batch: FeatureBatch) -> tuple[torch.Tensor, str]:
        device = self.lm_rows.device
        ids, hidden, mask = batch.ids.to(device), batch.hidden.to(device), batch.loss_mask
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.autocast):
            loss, ces, agrees = medusa_losses(
                self.heads, self.lm_rows, ids, hidden, mask.to(device)
            )
        shown = " ".join(f"{c:.2f}/{a:.2f}" for c, a in zip(ces, agrees, strict=True))
        return loss, f"ce/top-1 by head {shown}"

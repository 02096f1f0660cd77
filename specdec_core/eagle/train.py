"""`specdec train eagle|draft`: train an EAGLE head or a same-size token-level draft (CPU or GPU).

Recipe (EAGLE-1): the target's features come from one forward per sequence (features.py);
the model predicts the next feature; loss = SmoothL1(feature) + 0.1 * cross-entropy of
lm_head(prediction) against the target's distribution lm_head(true feature), both over a
reduced draft vocabulary (the most frequent tokens of the training data, EAGLE-3 style `d2t`)
because the lm_head is most of the cost on a CPU. Uniform noise on input features; AdamW
(0.9, 0.95), linear warm-up then cosine decay; bf16 autocast on the CPU.

- `eagle`, `arch="eagle1"`: EAGLE-1 layout head. Input pairs (f_t + noise, x_{t+1}); target
  f_{t+1}. It starts as "the next feature is this one": fc passes f_t through, the layers'
  output projections are scaled down (the target's feature scale is ~2; a random layer is far
  off). `layers` > 1 stacks decoder layers (the official EAGLE-1 code allows it); a trained
  head grown by extra layers (`--init HEAD --layers N`) starts with their output projections
  at zero, so it drafts exactly as the head it grew from until training moves them.
- `eagle`, `arch="eagle3"`: EAGLE-3 layout head. Input pairs (fused_t, x_{t+1}), where fused_t
  is cat(the target's hidden states entering layers 2, L//2, L-3) and fc maps it to h; the head
  predicts the next token only (cross-entropy against the target's distribution, no feature
  loss, no input noise: EAGLE-3 drops both), and `unroll` > 1 is its training-time test. It
  starts with fc passing the highest of the three layers through, its norm and lm_head copied
  from the target's final norm and lm_head rows, the output projections scaled down.
- `draft`: token-level draft of the same size (docs/architecture.md#token-level-draft): one
  decoder layer on the target's frozen embedding, its own final norm, the target's lm_head; input
  x_0..x_t, target f_t. Starts from the target's first layer and final norm. Saved as a
  LlamaForCausalLM config with only its own weights (layer + norm, ~7 MB fp16); the embedding / tied
  lm_head are copied from the target at load time (`token_draft.load_draft_dir`), which keeps the
  bundled file small.

Checkpoints (`OUT/checkpoint.pt`) are written every `save_every` steps and after each epoch;
a rerun with the same OUT resumes. With a time budget (`seconds`, e.g. a GPU held for minutes) the
cosine schedule runs over whichever ends first, the epochs or the time, and training stops
at the budget (then validates and saves as after an epoch). Each epoch ends with validation
on held-out conversations: teacher-forced top-1 agreement with the target and, for a few
held-out prompts, the real mean acceptance length tau of greedy decoding (k=4).
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from specdec_core import attention_mask
from specdec_core.eagle.features import Featured
from specdec_core.eagle.head import OFFICIAL, Eagle3Variant, EagleHead, head_config
from specdec_core.errors import SpecdecError


@dataclass
class TrainConfig:
    trains: str = "eagle"  # what is trained: eagle (an EAGLE head) | draft (a token-level draft)
    epochs: int = 2
    lr: float = 1e-3
    warmup: int = 50
    batch_tokens: int = 4096
    draft_vocab: int = 8192
    noise: float = 0.2  # uniform noise width on input features (eagle)
    ce_weight: float = 0.1
    unroll: int = 2  # eagle: drafting steps simulated in training (1 = plain EAGLE-1)
    arch: str = "eagle1"  # eagle: head layout, eagle1 | eagle3
    seed: int = 0
    save_every: int = 100
    seconds: float = 0.0  # > 0: a time budget; the schedule decays over it and training stops


def frequent_tokens(data: list[Featured], size: int, vocab: int) -> torch.Tensor:
    """The `size` most frequent token ids of the data (sorted ascending): the draft vocabulary."""
    counts = Counter()
    for item in data:
        counts.update(item.ids.tolist())
    ids = [token for token, _ in counts.most_common(size)]
    seen = set(ids)
    ids += [t for t in range(vocab) if t not in seen][: size - len(ids)]
    return torch.tensor(sorted(ids))


def batches(data: list[Featured], batch_tokens: int, generator: torch.Generator):
    """Shuffled batches of similar-length sequences, about `batch_tokens` padded tokens each."""
    order = sorted(range(len(data)), key=lambda i: len(data[i].ids))
    groups, group, width = [], [], 0
    for i in order:
        width = max(width, len(data[i].ids))
        if group and (len(group) + 1) * width > batch_tokens:
            groups.append(group)
            group, width = [], len(data[i].ids)
        group.append(i)
    if group:
        groups.append(group)
    perm = torch.randperm(len(groups), generator=generator).tolist()
    return [[data[i] for i in groups[j]] for j in perm]


def collate(
    items: list[Featured], device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """-> ids [B, T], features [B, T, h], loss mask [B, T] (positions >= start and < length),
    EAGLE-3 inputs [B, T, 3h] (None unless the items carry them), on `device`."""
    width = max(len(item.ids) for item in items)
    h = items[0].hidden.shape[-1]
    ids = torch.zeros(len(items), width, dtype=torch.long)
    hidden = torch.zeros(len(items), width, h, dtype=items[0].hidden.dtype)
    mask = torch.zeros(len(items), width, dtype=torch.bool)
    fused = None
    if items[0].fused is not None:
        fused = torch.zeros(len(items), width, items[0].fused.shape[-1], dtype=hidden.dtype)
    for row, item in enumerate(items):
        n = len(item.ids)
        ids[row, :n], hidden[row, :n] = item.ids, item.hidden
        if fused is not None:
            fused[row, :n] = item.fused
        mask[row, item.start : n] = True
    fused = fused.to(device) if fused is not None else None
    return ids.to(device), hidden.to(device), mask.to(device), fused


class Objective(nn.Module):
    """Prediction and targets for one batch, for an EAGLE head or a token-level draft."""

    def __init__(
        self, trains: str, model: nn.Module, lm_head, draft_ids, noise: float, unroll: int = 1
    ):
        super().__init__()
        self.trains, self.model, self.noise, self.unroll = trains, model, noise, unroll
        self.eagle3 = trains == "eagle" and model.kind == "eagle3"  # tokens out, no feature loss
        self.register_buffer("draft_ids", draft_ids)  # [Vd] target ids of the draft vocabulary
        self.register_buffer("lm_rows", lm_head.weight[draft_ids].detach().float())  # [Vd, h]

    def forward(self, ids, hidden, mask, fused=None):
        """-> predicted features [N, h], true features [N, h] at the loss positions (for an
        EAGLE-3 head the prediction is its output hidden state, before its own norm)."""
        if self.trains == "eagle":
            return self._eagle(ids, fused if self.eagle3 else hidden, hidden, mask)
        pred = self.model.model(input_ids=ids).last_hidden_state  # [B, T, h] after norm
        keep = mask.clone()
        keep[:, :-1] |= mask[:, 1:]  # position start-1 predicts the first answer token
        return pred[keep], hidden[keep]

    def _eagle(self, ids, inputs, hidden, mask):
        """Pass 1: pairs (f_t + noise, x_{t+1}) predict f_{t+1} (teacher forcing); f is
        `inputs` (the feature itself for EAGLE-1, the fused layers for EAGLE-3).

        Pass j > 1 (`unroll`, as at drafting time): row p takes pass j-1's prediction with the
        token x_{p+j} at position p+j-1, attends to pass 1's rows 0..p (the real prefix) and to
        row p of every later pass (its own chain), and predicts f_{p+j}.
        """
        B, T = ids.shape
        f_in = inputs[:, :-1].float()
        if self.training and self.noise and not self.eagle3:
            f_in = f_in + (torch.rand_like(f_in) - 0.5) * self.noise
        positions = torch.arange(T - 1, device=ids.device)[None].expand(B, -1)
        cache = self.model.new_cache() if self.unroll > 1 else None
        out = self.model.step(f_in, ids[:, 1:], positions, None, cache).hidden  # [B, T-1, h]
        preds, trues = [out[mask[:, 1:]]], [hidden[:, 1:][mask[:, 1:]]]
        widths = [T - 1]
        for j in range(2, min(self.unroll, T - 1) + 1):
            n = T - j  # rows p = 0..T-j-1
            dev = ids.device
            allowed = [torch.ones(n, widths[0], dtype=torch.bool, device=dev).tril()]
            allowed += [torch.eye(n, w, dtype=torch.bool, device=dev) for w in widths[1:]]
            allowed.append(torch.eye(n, dtype=torch.bool, device=dev))
            allowed = torch.cat(allowed, dim=1)
            additive = attention_mask.additive(allowed, torch.float32)
            out = self.model.step(
                out[:, :n], ids[:, j:], positions[:, :n] + j - 1, additive, cache
            ).hidden
            widths.append(n)
            preds.append(out[mask[:, j:]])
            trues.append(hidden[:, j:][mask[:, j:]])
        return torch.cat(preds), torch.cat(trues)

    def draft_logits(self, pred: torch.Tensor) -> torch.Tensor:
        """[N, h] predictions -> [N, Vd] draft-vocabulary logits (as drafting computes them)."""
        if self.eagle3:
            return self.model.logits(pred)
        return pred @ self.lm_rows.T.to(pred.dtype)

    def losses(self, pred: torch.Tensor, true: torch.Tensor) -> tuple[torch.Tensor, ...]:
        true = true.to(pred.dtype)
        # EAGLE-3 predicts tokens, not features
        feature = pred.new_zeros(()) if self.eagle3 else F.smooth_l1_loss(pred, true)
        p = torch.softmax(true @ self.lm_rows.T.to(pred.dtype), dim=-1).float()  # [N, Vd]
        log_q = torch.log_softmax(self.draft_logits(pred).float(), dim=-1)
        ce = -(p * log_q).sum(-1).mean()
        agree = (p.argmax(-1) == log_q.argmax(-1)).float().mean()
        return feature, ce, agree


def build_model(
    trains: str,
    target,
    draft_ids: torch.Tensor,
    arch: str = "eagle1",
    layers: int = 1,
    variant: Eagle3Variant = OFFICIAL,
) -> nn.Module:
    """A fresh EAGLE head (eagle, layout `arch`, `layers` decoder layers for eagle1, an
    EAGLE-3 `variant` such as EAGLE 3.1's input norms) or one-layer LlamaForCausalLM (draft),
    initialised from the target (see the module docstring), in float32 for training."""
    from transformers import LlamaForCausalLM

    config = head_config(target.config, num_hidden_layers=1)
    if trains == "eagle":
        head = EagleHead(
            config, kind=arch, bias=True, draft_vocab=len(draft_ids), layers=layers,
            variant=variant,
        )  # fmt: skip
        h = config.hidden_size
        with torch.no_grad():
            if arch == "eagle1":  # "the next feature is this feature": fc passes f_t
                head.fc.weight[:, h:] = torch.eye(h)
                head.fc.bias.zero_()
            else:  # fc passes the highest fused layer; the target's norm and lm_head rows
                head.fc.weight.zero_()
                head.fc.weight[:, 2 * h :] = torch.eye(h)
                head.norm.weight.copy_(target.model.norm.weight)
                rows = target.get_output_embeddings().weight[draft_ids.to(target.device)]
                head.lm_head.weight.copy_(rows)
            for layer in head.layers if arch == "eagle1" else [head.midlayer]:
                layer.self_attn.o_proj.weight.mul_(0.1)
                layer.mlp.down_proj.weight.mul_(0.1)
        head.set_draft_vocab(draft_ids)
        head = head.float().to(target.device)
        return head.bind(target.get_input_embeddings(), target.get_output_embeddings())
    config.tie_word_embeddings = True
    draft = LlamaForCausalLM(config)
    draft.model.layers[0].load_state_dict(target.model.layers[0].state_dict())
    draft.model.norm.load_state_dict(target.model.norm.state_dict())
    draft.model.embed_tokens = target.get_input_embeddings()
    draft.lm_head = target.get_output_embeddings()
    return draft.float().to(target.device)


def trainable(model: nn.Module, trains: str) -> list[nn.Parameter]:
    if trains == "eagle":
        return list(model.parameters())  # embedding / lm_head are bound, not owned
    return list(model.model.layers.parameters()) + list(model.model.norm.parameters())


def train_step(objective: Objective, items, optimizer, params, ce_weight: float):
    """One optimiser step on a batch of `items` -> (feature loss, ce, top-1 agreement)."""
    device = objective.lm_rows.device  # the target's device: data moves there batch by batch
    ids, hidden, mask, fused = collate(items, device)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        pred, true = objective(ids, hidden, mask, fused)
        feature, ce, agree = objective.losses(pred.float(), true.float())
    optimizer.zero_grad(set_to_none=True)
    (feature + ce_weight * ce).backward()
    torch.nn.utils.clip_grad_norm_(params, 0.5)
    optimizer.step()
    return feature, ce, agree


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


def train(
    objective: Objective,
    data: list[Featured],
    config: TrainConfig,
    out: Path,
    validate=None,
    on_step=None,
) -> list[dict]:
    """Run the epochs (resuming from OUT/checkpoint.pt); return the per-epoch history.
    `on_step(step, steps, steps_per_epoch, history)`, when given, is called after every
    optimiser step and after each epoch's validation."""
    params = trainable(objective.model, config.trains)
    for p in objective.model.parameters():
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW(params, lr=config.lr, betas=(0.9, 0.95), weight_decay=0.0)
    generator = torch.Generator().manual_seed(config.seed)
    steps_per_epoch = len(batches(data, config.batch_tokens, torch.Generator().manual_seed(0)))
    total = max(1, steps_per_epoch * config.epochs)
    # what a resumed run must share with the checkpoint for its step count to mean the same
    plan = {
        "sequences": len(data),
        "tokens": sum(len(item.ids) for item in data),
        "batch_tokens": config.batch_tokens,
    }
    state = {"epoch": 0, "step": 0, "history": [], "plan": plan}
    checkpoint = out / "checkpoint.pt"
    if checkpoint.is_file():
        saved = torch.load(checkpoint, weights_only=True, map_location="cpu")
        if saved["state"].get("plan", plan) != plan:
            raise SpecdecError(
                f"{checkpoint} is from a run on other data or batches ({saved['state']['plan']}; "
                f"this run: {plan}), so it cannot resume; use a new --out, or delete the "
                "checkpoint to start over (--init continues a finished head on new data)"
            )
        objective.model.load_state_dict(saved["model"], strict=False)
        optimizer.load_state_dict(saved["optimizer"])
        generator.set_state(saved["generator"])
        set_noise_state(saved.get("noise"))
        state = saved["state"]
    epoch_start = generator.get_state()  # a checkpoint mid-epoch redraws the same batch order

    def save() -> None:
        own = objective.model.state_dict()
        if config.trains == "draft":  # the target's embedding and lm_head are not its own
            own = {k: v for k, v in own.items() if "embed" not in k and "lm_head" not in k}
        torch.save(
            {
                "model": own,
                "optimizer": optimizer.state_dict(),
                "generator": epoch_start,
                "noise": noise_state(),
                "state": state,
            },
            checkpoint,
        )

    clock = time.monotonic() - state.get("seconds", 0.0)  # a resumed run counts its time

    def progress() -> float:
        """Share of the schedule done: of the steps, or of the time budget if that is ahead."""
        done = state["step"] / total
        if config.seconds:
            done = max(done, (time.monotonic() - clock) / config.seconds)
        return min(1.0, done)

    while state["epoch"] < config.epochs and not state.get("out_of_time"):
        epoch_start = generator.get_state()
        plan = batches(data, config.batch_tokens, generator)
        done_in_epoch = state["step"] - state["epoch"] * steps_per_epoch
        objective.train()
        bar = tqdm(
            plan[done_in_epoch:],
            desc=f"epoch {state['epoch'] + 1}/{config.epochs}",
            unit="batch",
            dynamic_ncols=True,
        )
        for items in bar:
            if config.seconds and progress() >= 1.0:
                state["out_of_time"] = True
                break
            lr = config.lr * min(1.0, (state["step"] + 1) / config.warmup)
            lr *= 0.5 * (1 + math.cos(math.pi * progress()))
            for group in optimizer.param_groups:
                group["lr"] = lr
            feature, ce, agree = train_step(objective, items, optimizer, params, config.ce_weight)
            state["step"] += 1
            bar.set_postfix(
                feat=f"{feature.item():.3f}", ce=f"{ce.item():.2f}", acc=f"{agree.item():.2f}"
            )
            state["seconds"] = time.monotonic() - clock
            if state["step"] % config.save_every == 0:
                save()
            if on_step is not None:
                on_step(state["step"], total, steps_per_epoch, state["history"])
        if state.get("out_of_time"):  # epochs done so far, as a fraction
            record = {"epoch": round(state["step"] / steps_per_epoch, 2), "stopped": "time"}
        else:
            state["epoch"] += 1
            epoch_start = generator.get_state()
            record = {"epoch": state["epoch"]}
        record.update(step=state["step"], time=time.time())
        if validate is not None:
            objective.eval()
            record.update(validate(objective))
        state["history"].append(record)
        print(json.dumps(record), flush=True)
        save()
        if on_step is not None:
            on_step(state["step"], total, steps_per_epoch, state["history"])
    return state["history"]


@torch.no_grad()
def teacher_forced_agreement(objective: Objective, data: list[Featured], lm_head) -> float:
    """Share of held-out answer positions where the model's top-1 equals the target's top-1."""
    hits = total = 0
    for item in data:
        ids, hidden, mask, fused = collate([item], objective.lm_rows.device)
        pred, true = objective(ids, hidden, mask, fused)
        draft = objective.draft_logits(pred).argmax(-1)  # draft-vocab ids
        draft_ids = objective.draft_ids[draft]
        hits += int((draft_ids == lm_head(true.to(lm_head.weight.dtype)).argmax(-1)).sum())
        total += len(true)
    return hits / max(1, total)

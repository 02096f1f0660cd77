"""Online adaptation: an EAGLE head fine-tuned between runs on the target's own recent runs.

After a run, `Adapter.add_run` re-runs the target once over prompt + output (teacher-forced,
not timed) and keeps the (feature, next token) pairs in an `AdaptationBuffer` bounded in
tokens (the oldest runs are evicted first). `Adapter.adapt(budget_seconds)` then takes a few
optimiser steps on the buffer with the training objective (training/objective.py: feature SmoothL1 +
token cross-entropy, the unrolled second pass), starting from the loaded head and regularised
toward it so it does not forget what it knew: an L2 penalty to the initial weights and a KL
term KL(initial head || adapted head) on the draft vocabulary. The trained float32 copy is then
written into the live head, which every drafter using it (eagle, eagle2, eagle2-lookup) reads.

Adaptation never runs during a run: a run holds `Adapter.during_run()`, and `add_run` /
`adapt` refuse while it is held. Output stays lossless whatever the head learns: the verifier
decides every token. `save(dir)` writes a NEW head directory (the official layout and a card,
float32 so that it reloads to the same drafts); `reset()` returns to the loaded head.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.head import EagleHead
from specdec_core.measurement.bench_entries import entry_method
from specdec_core.models.loading import LoadedModel
from specdec_core.run.runner import extra_kind
from specdec_core.training.objective import Objective
from specdec_core.training.online_features import FeatureBatch, joined, target_features


@dataclass(frozen=True)
class AdaptSettings:
    cap_tokens: int = 4096  # buffer size in tokens (prompt + output); the oldest runs go first
    lr: float = 1e-4
    l2: float = 1.0  # weight of the mean squared distance to the initial weights, x 1e4
    kl: float = 0.5  # weight of KL(initial head || adapted head) on the draft vocabulary
    ce_weight: float = 0.1  # as in training (eagle1); an EAGLE-3 head has only the token loss
    unroll: int = 2
    batch_tokens: int = 2048
    seed: int = 0


@dataclass(frozen=True)
class AdaptReport:
    steps: int  # optimiser steps in this call
    seconds: float
    loss: float | None  # of the last step
    total_steps: int  # since the loaded head (or the last reset)
    buffer_tokens: int
    runs: int  # in the buffer


class AdaptationBuffer:
    """Runs with the target's features (a `FeatureBatch` of one row each), at most
    `cap_tokens` tokens in all; the oldest are evicted first, and a run longer than the cap
    keeps its last `cap_tokens` tokens."""

    def __init__(self, cap_tokens: int) -> None:
        if cap_tokens < 2:
            raise SpecdecError(f"the adaptation buffer needs at least 2 tokens (got {cap_tokens})")
        self.cap_tokens = cap_tokens
        self._items: deque[FeatureBatch] = deque()

    @property
    def tokens(self) -> int:
        return sum(item.tokens for item in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[FeatureBatch]:
        return list(self._items)

    def add(self, item: FeatureBatch) -> None:
        """Keep a run: a batch of one unpadded row."""
        extra = item.tokens - self.cap_tokens
        if extra > 0:
            item = replace(
                item, ids=item.ids[:, extra:], attention_mask=item.attention_mask[:, extra:],
                loss_mask=item.loss_mask[:, extra:], hidden=item.hidden[:, extra:],
                layer_hidden=tuple(t[:, extra:] for t in item.layer_hidden),
            )  # fmt: skip
        self._items.append(item)
        while self.tokens > self.cap_tokens:
            self._items.popleft()

    def clear(self) -> None:
        self._items.clear()


class Adapter:
    """Adapts `head` (bound to `target`, used by the drafters) to the runs it is given."""

    def __init__(
        self,
        head: EagleHead,
        target: LoadedModel,
        settings: AdaptSettings | None = None,
        source: str | None = None,
    ) -> None:
        self.head, self.target = head, target
        self.settings = settings or AdaptSettings()
        self.source = source  # the loaded head's spec, for the card
        self.buffer = AdaptationBuffer(self.settings.cap_tokens)
        self.initial = {  # the loaded head's weights in float32, its buffers as they are
            k: (v.float() if v.is_floating_point() else v).detach().clone()
            for k, v in head.state_dict().items()
        }
        self.model = self._copy().train()  # float32, trained
        self.reference = self._copy().eval().requires_grad_(False)  # the loaded head
        lm_head = target.model.get_output_embeddings()
        draft_ids = head.draft_ids()
        if draft_ids is None:
            draft_ids = torch.arange(head.config.vocab_size, device=target.device)
        unroll = self.settings.unroll
        self.objective = Objective("eagle", self.model, lm_head, draft_ids, 0.0, unroll)
        self._reference_objective = Objective(
            "eagle", self.reference, lm_head, draft_ids, 0.0, unroll
        ).eval()
        self._busy = threading.Lock()  # held by a run, and by add_run / adapt
        self._seen: set[str] = set()
        self.taus: list[tuple[int, float]] = []  # (adaptation steps before the run, its τ)
        self._fresh()

    def _copy(self) -> EagleHead:
        head = self.head
        layers = len(head.layers) if head.kind == "eagle1" else 1
        bias = head.fc.bias is not None
        copy = EagleHead(head.config, head.kind, bias, head.draft_vocab, layers, head.variant)
        copy.load_state_dict(self.initial)
        model = self.target.model
        copy = copy.float().to(self.target.device)
        return copy.bind(model.get_input_embeddings(), model.get_output_embeddings())

    def _fresh(self) -> None:
        self.steps = 0
        params = list(self.model.parameters())
        self.optimizer = torch.optim.AdamW(
            params, lr=self.settings.lr, betas=(0.9, 0.95), weight_decay=0.0
        )
        self.generator = torch.Generator().manual_seed(self.settings.seed)

    # -- the run guard ------------------------------------------------------------------------
    @contextlib.contextmanager
    def during_run(self) -> Iterator[None]:
        """Held by a run: `add_run` and `adapt` refuse meanwhile."""
        with self._busy:
            yield

    @contextlib.contextmanager
    def _between_runs(self) -> Iterator[None]:
        if not self._busy.acquire(blocking=False):
            raise SpecdecError("a run is in progress; the head adapts between runs, not during")
        try:
            yield
        finally:
            self._busy.release()

    # -- data ---------------------------------------------------------------------------------
    def add_run(self, prompt_ids: list[int], token_ids, tau: float | None = None) -> bool:
        """Keep a finished run's (feature, next token) pairs (one teacher-forced target forward
        over prompt + output); `tau`: its τ, for `tau_line`. False if it brought nothing new
        (no output, or the same prompt and output as a run already kept)."""
        if tau is not None:
            self.taus.append((self.steps, tau))
        ids = list(prompt_ids) + list(token_ids)
        key = hashlib.sha1(repr(ids).encode()).hexdigest()
        if not token_ids or len(ids) < 2 or key in self._seen:
            return False
        with self._between_runs():
            self._seen.add(key)
            layers = self._feature_layers()
            self.buffer.add(target_features(self.target, [(ids, len(prompt_ids))], layers))
        return True

    def _feature_layers(self) -> tuple[int, ...]:
        from specdec_core.drafters.eagle import feature_layers

        return feature_layers(self.head, self.target.model.config.num_hidden_layers)

    # -- training -----------------------------------------------------------------------------
    def adapt(self, budget_seconds: float, max_steps: int | None = None) -> AdaptReport:
        """Optimiser steps on the buffer until `budget_seconds` have passed (at least one step
        when there is data, at most `max_steps`); then the live head drafts with the result."""
        began = time.monotonic()
        steps, loss = 0, None
        with self._between_runs():
            if len(self.buffer):
                while max_steps is None or steps < max_steps:
                    loss = self._step(self._batch())
                    steps += 1
                    if time.monotonic() - began >= budget_seconds:
                        break
                self._publish()
        return AdaptReport(
            steps, round(time.monotonic() - began, 3), loss, self.steps,
            self.buffer.tokens, len(self.buffer),
        )  # fmt: skip

    def _batch(self) -> FeatureBatch:
        """Random runs of the buffer, about `batch_tokens` tokens (at least one run)."""
        items = self.buffer.items()
        order = torch.randperm(len(items), generator=self.generator).tolist()
        batch, width = [], 0
        for i in order:
            width = max(width, items[i].tokens)
            if batch and (len(batch) + 1) * width > self.settings.batch_tokens:
                break
            batch.append(items[i])
        return joined(batch)

    def _step(self, batch: FeatureBatch) -> float:
        from specdec_core.models.prepacked_linear import fast_bf16

        s, device = self.settings, self.target.device
        autocast = device.type == "cuda" or fast_bf16(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            pred, true = self.objective.on(batch)
            feature, ce, _ = self.objective.losses(pred.float(), true.float())
            loss = feature + (1.0 if self.objective.eagle3 else s.ce_weight) * ce
            if s.kl:
                with torch.no_grad():
                    before, _ = self._reference_objective.on(batch)
                    p0 = F.log_softmax(self._reference_objective.draft_logits(before).float(), -1)
                log_q = F.log_softmax(self.objective.draft_logits(pred).float(), -1)
                loss = loss + s.kl * (p0.exp() * (p0 - log_q)).sum(-1).mean()
        if s.l2:
            named = dict(self.model.named_parameters())
            drift = sum(((p - self.initial[n]) ** 2).sum() for n, p in named.items())
            count = sum(p.numel() for p in named.values())
            loss = loss + s.l2 * 1e4 * drift / count
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 0.5)
        self.optimizer.step()
        self.steps += 1
        return float(loss.detach())

    @torch.no_grad()
    def _publish(self) -> None:
        """The trained weights into the live head (in its dtype; packed copies repack)."""
        self.head.load_state_dict(self.model.state_dict())

    # -- reset and save -----------------------------------------------------------------------
    def reset(self) -> None:
        """Back to the loaded head: its weights, an empty buffer, no τ history."""
        with self._between_runs():
            with torch.no_grad():
                self.model.load_state_dict(self.initial)
                self.head.load_state_dict(self.initial)
            self.buffer.clear()
            self._seen.clear()
            self.taus.clear()
            self._fresh()

    def save(self, directory: str | Path, card: dict | None = None) -> Path:
        """Write the adapted head to a NEW directory (refused if it exists and is not empty),
        in float32, with a card saying what it was adapted from and on what."""
        from specdec_core.heads.eagle.formats import save_head

        directory = Path(directory)
        if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
            raise SpecdecError(
                f"{directory} exists and is not empty; save the adapted head to a new directory"
            )
        record = {
            "kind": "eagle",
            "arch": self.head.kind,
            "adapted_from": self.source,
            "adaptation": {
                **asdict(self.settings),
                "steps": self.steps,
                "runs": len(self.buffer),
                "buffer_tokens": self.buffer.tokens,
                "tau_before": self.tau_before(),
                "tau_latest": self.taus[-1][1] if self.taus else None,
            },
            **(card or {}),
        }
        with self._between_runs():
            return save_head(self.model, directory, record, dtype=torch.float32)

    # -- what it did --------------------------------------------------------------------------
    def tau_before(self) -> float | None:
        """Mean τ of the runs before the first adaptation step (None without any)."""
        before = [tau for steps, tau in self.taus if steps == 0]
        return sum(before) / len(before) if before else None

    def tau_line(self) -> str:
        """τ before adaptation against the latest run's, in one line (empty before any run)."""
        if not self.taus:
            return ""
        before, (steps, latest) = self.tau_before(), self.taus[-1]
        if steps == 0 or before is None:
            return f"τ {before:.2f} before adaptation ({len(self.taus)} runs)"
        return (
            f"τ {before:.2f} before adaptation → {latest:.2f} in the latest run "
            f"({self.steps} steps on {self.buffer.tokens} tokens of {len(self.buffer)} runs)"
        )


class BetweenPrompts:
    """`run_bench`'s `after_prompt` hook for `specdec bench --adapt`: after each prompt, every
    head-drafting method's head adapts on that method's runs for `seconds`."""

    def __init__(
        self, target: LoadedModel, seconds: float, settings: AdaptSettings, source: str
    ) -> None:
        self.target, self.seconds, self.settings, self.source = target, seconds, settings, source
        self.adapters: dict[str, Adapter] = {}  # method (each loads its own head) -> adapter
        self.reports: dict[str, list[AdaptReport]] = {}

    def __call__(self, ids: list[int], rows, extras: dict) -> None:
        for row in rows:
            label = row.method  # the bench entry as written, e.g. eagle@DIR:threshold
            if label not in extras or extra_kind(entry_method(label)) != "head":
                continue
            if label not in self.adapters:
                self.adapters[label] = Adapter(
                    extras[label], self.target, self.settings, self.source
                )
            self.adapters[label].add_run(ids, row.token_ids, row.mean_accept_length)
        for method, adapter in self.adapters.items():
            self.reports.setdefault(method, []).append(adapter.adapt(self.seconds))

    def record(self) -> dict:
        """What `bench --json-out` records under config.adaptation."""
        return {
            "seconds_per_prompt": self.seconds,
            **asdict(self.settings),
            "methods": {
                method: {
                    "tau_before": adapter.tau_before(),
                    "tau_by_prompt": [tau for _, tau in adapter.taus],
                    "steps": adapter.steps,
                    "buffer_tokens": adapter.buffer.tokens,
                }
                for method, adapter in self.adapters.items()
            },
        }

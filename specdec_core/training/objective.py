"""What a training step optimises: the prediction and the losses of one batch, for an EAGLE head
or a token-level draft (the same objective adapts a head online, adaptation.py).

- EAGLE-1 head (`arch="eagle1"`): input pairs (f_t + noise, x_{t+1}), target f_{t+1}; loss =
  SmoothL1(feature) + `ce_weight` * cross-entropy of lm_head(prediction) against the target's
  distribution lm_head(true feature), both over a reduced draft vocabulary (the most frequent
  tokens of the training data, EAGLE-3 style `d2t`) because the lm_head is most of the cost on a
  CPU. Uniform noise on input features.
- EAGLE-3 head (`arch="eagle3"`): input pairs (fused_t, x_{t+1}), where fused_t is cat(the
  target's hidden states entering layers 2, L//2, L-3); the head predicts the next token only
  (cross-entropy against the target's distribution, no feature loss, no input noise: EAGLE-3
  drops both).
- `unroll` > 1 (both layouts): drafting steps simulated in training, each pass feeding the
  previous pass's prediction back as drafting does (EAGLE-3's training-time test).
- token-level draft: input x_0..x_t, target f_t (the same losses over its own final norm's
  output, through the target's lm_head).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from specdec_core.decoding import attention_mask
from specdec_core.training.online_features import FeatureBatch


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

    def on(self, batch: FeatureBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward` on a batch of the target's features (online_features.py)."""
        hidden = batch.hidden.to(self.lm_rows.device)
        fused = batch.fused.to(hidden.device) if batch.fused is not None else None
        return self(batch.ids.to(hidden.device), hidden, batch.loss_mask.to(hidden.device), fused)

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

"""`specdec train` and scripts/gpu_distill.py: one driver from settings to a saved head or draft.

- `request.py`: `TrainRequest`, every setting of a training run, checked before a model loads.
- `data_sources.py`: the `--data` sources (ShareGPT, self-distillation, JSONL, saved answers)
  and the held-out split.
- `magpie.py`: `--data magpie`, prompts the target writes itself, deduplicated and kept apart
  from evaluation prompts; `kinds.py`: the kinds of request, their hints and held-out prompts.
- `layout.py`: the model to train (layout, depth, the --init head, the fused target layers).
- `driver.py`: `train_from_request` (collects the data itself) and `train_on_samples` (for
  data collected elsewhere): features -> training with per-epoch validation -> save + card.
- `card.py`: the model card (`specdec_card.json`) both write.
- `validation.py`: tau of real greedy decoding on held-out prompts, and the table by kind.

The model code itself (head, objective, training loop, features) lives in `specdec_core/eagle/`.
"""

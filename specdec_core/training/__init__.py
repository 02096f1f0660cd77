"""Training EAGLE heads and token-level drafts: `specdec train`, scripts/gpu_distill.py, and the
data they train on (`specdec data`).

- `request.py`: `TrainRequest`, every setting of a training run, checked before a model loads.
- `data_sources.py`: the `--data` sources (ShareGPT, self-distillation, JSONL, saved answers)
  and the held-out split; `datasets.py`: the samples themselves (`Sample`, answering prompts,
  ShareGPT).
- `magpie.py`: `--data magpie`, prompts the target writes itself, deduplicated and kept apart
  from evaluation prompts; `kinds.py`: the kinds of request, their hints and held-out prompts.
- `online_features.py`: the target's features computed batch by batch as training takes them
  (`online_batches`, `FeatureBatch`; no feature files, memory bounded by the batch);
  `training_set.py`: every trainer's sources collected under one time budget, and the card
  of a finished run.
- `layout.py`: what to train (layout, depth, the --init head, the fused target layers);
  `starting_model.py`: the model it starts as, built around the target.
- `common_request.py`: what every training request shares (its data, budgets, work folder,
  the target's dtype); `common_training.py`: the checkpointed, resumable epochs every trainer
  runs (EAGLE and draft, Medusa, MLP speculator); `time_budget.py`: one time budget per run.
- `objective.py`: a batch's prediction and losses; `loop.py`: their training steps.
- `driver.py`: `train_from_request` (collects the data itself) and `train_on_samples` (for
  data collected elsewhere): training on features computed as it goes, with per-epoch
  validation -> save + card.
- `distill.py`: scripts/gpu_distill.py's stages: answer prompts and train within a
  wall-clock budget.
- `card.py`: the model card (`specdec_card.json`) both write.
- `validation.py`: teacher-forced top-1, tau of real greedy decoding on held-out prompts, and
  the table by kind every trainer writes; `progress_file.py`: `--progress-file`.
- `generation_job.py`, `request_streams.py`: `specdec data`, a resumable job that generates
  answers to train on; `job_plan.py`: its plan and folder (lock, job.json), torch-free;
  `job_shards.py`, `corpus_card.py`: its shards and the card of the corpus they make.
- `adaptation.py`: online adaptation of an EAGLE head between runs (`--adapt`, the window's
  Adaptation box).
"""

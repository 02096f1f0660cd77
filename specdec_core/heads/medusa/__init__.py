"""Medusa heads (Cai et al. 2024, Medusa-1): K extra decoding heads on the target's last hidden
state, head i predicting the token i + 2 positions after that state's token.

- head.py: the module (`MedusaHeads`: per head, residual blocks x + SiLU(Linear(x)), then an
  lm head over the target's vocabulary or a reduced one);
- formats.py: reading FasterDecoding's and vLLM's published layouts, writing both.

Medusa's typical acceptance on a tree is `verifiers/typical.py`'s `typical_path`.

The drafter is drafters/medusa.py, training training/medusa.py; docs/medusa.md covers all.
"""

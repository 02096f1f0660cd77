"""EAGLE: a feature-level draft head (Li et al. 2024) and its checkpoint formats; `data.py` holds
the training samples (ShareGPT, the target's answers) that specdec_core/training/ trains on."""

"""EAGLE: a feature-level draft head (Li et al. 2024), its checkpoint formats and training."""

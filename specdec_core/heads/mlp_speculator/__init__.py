"""IBM's MLP speculator (fms-extras `MLPSpeculator`, as vLLM loads it): the model (head.py) and
its checkpoint layout, loading and export (formats.py). Drafting is in
specdec_core/drafters/mlp_speculator.py, training in specdec_core/training/mlp_speculator.py."""

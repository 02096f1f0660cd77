"""Native multi-token prediction (MTP) layers as draft heads: DeepSeek-V3, GLM-4.5, Qwen3-Next,
Qwen3.5 and MiMo ship them in their own checkpoints. layouts.py says where each family keeps
them (no torch), module.py is the layer around the target's own decoder block, load.py reads it
from the checkpoint; drafters/mtp.py drafts chains and trees with it. docs/mtp.md."""

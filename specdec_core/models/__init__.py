"""Models: loading a spec (hub, cache, GGUF, offload), checking and sizing weights, the CPU fast
paths."""

"""Which EAGLE layout a head is, from its weight names and its config.json; no torch.

The rules of docs/architecture.md#eagle-heads, shared by loading (formats.py) and by the
listing of models on this machine (local_models.py), which reads only names and configs:
`midlayer.*` (or speculators' `layers.0.hidden_norm`) is EAGLE-3, `layers.0.*` is EAGLE-1/2;
a config may declare its layout by an architecture or model type naming EAGLE.
"""

from __future__ import annotations

from collections.abc import Iterable

# SGLang's draft vocabulary for an EAGLE-1/2 head (`--speculative-token-map FILE`): the target ids
# the head drafts over, in draft order, as `torch.save(list_of_ids)`. SGLang's EAGLE-1 loader
# reads no d2t / t2d from the weights, so a head exported for it carries its reduced vocabulary
# in this file beside the weights (specdec_core/serving/head_export.py), and loading reads it back.
TOKEN_MAP = "hot_ids.pt"


def layout_of(keys: Iterable[str]) -> str | None:
    """'eagle3', 'eagle1' or None (not an EAGLE head) from weight names. A causal LM's
    `model.layers.0.*` is not `layers.0.*`: strip a head's `model.` prefix before asking."""
    names = set(keys)
    if any(key.startswith("midlayer.") for key in names) or "layers.0.hidden_norm.weight" in names:
        return "eagle3"
    if any(key.startswith("layers.0.") for key in names):
        return "eagle1"
    return None


def declared_kind(config: dict) -> str | None:
    """The layout a head config names (architectures, model type), if it names one."""
    names = [*(config.get("architectures") or []), config.get("model_type"),
             config.get("speculators_model_type")]  # fmt: skip
    text = " ".join(str(name).lower() for name in names if name)
    if "eagle3" in text:
        return "eagle3"
    return "eagle1" if "eagle" in text else None


def is_peagle(config: dict) -> bool:
    """Does a head config declare a P-EAGLE head (speculators' `peagle`, or an EAGLE-3 config
    naming the `mask_token_id` its mask rows read)? heads/eagle/peagle.py reads those."""
    kind = config.get("speculators_model_type")
    return kind == "peagle" or (kind is None and "mask_token_id" in config)


def flat_config(config: dict) -> dict:
    """A head config with speculators' nested `transformer_layer_config` lifted to the top."""
    layer = config.get("transformer_layer_config")
    if not isinstance(layer, dict):
        return config
    outer = {k: v for k, v in config.items() if k != "transformer_layer_config" and v is not None}
    outer.pop("model_type", None)
    return {**layer, **outer}

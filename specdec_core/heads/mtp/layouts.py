"""Where each model family keeps its multi-token prediction (MTP) layers; no torch.

A model trained with native MTP ships its MTP layers inside its own checkpoint, beside the
target's weights, under names its own serving engines read (vLLM's `deepseek_mtp.py`,
`glm4_moe_mtp.py`, `qwen3_next_mtp.py`, `qwen3_5_mtp.py`, `mimo_mtp.py`; SGLang's
`deepseek_nextn.py`, `glm4_moe_nextn.py`). Each MTP layer is a wrapper (two input norms, a
projection of the concatenated embedding and hidden state, an output norm, maybe a head of
its own) around one full decoder block of the target's own kind. `MtpLayout` records, per
family, the names and where vLLM's forward puts the norms; docs/mtp.md lists them.

    deepseek   (DeepSeek-V3, GLM-4.5)   model.layers.{L + k}.{enorm, hnorm, eh_proj,
               shared_head.norm, shared_head.head, embed_tokens} + the block's own names
    qwen3_next (Qwen3-Next, Qwen3.5)    mtp.{pre_fc_norm_embedding, pre_fc_norm_hidden, fc,
               norm} once, the blocks at mtp.layers.{k}.*
    mimo       (MiMo)                   model.mtp_layers.{k}.{token_layernorm,
               hidden_layernorm, input_proj, final_layernorm} + the block's own names

L is the target's `num_hidden_layers`, k the MTP layer (0 in every published checkpoint).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# the wrapper's parts, as the module names them (specdec_core/heads/mtp/module.py)
EMBEDDING_NORM, HIDDEN_NORM, PROJECTION = "embedding_norm", "hidden_norm", "fc"
OUTPUT_NORM, HEAD, BLOCK = "output_norm", "head", "block"


@dataclass(frozen=True)
class MtpLayout:
    name: str
    families: str  # the published models in this layout, for messages
    block_prefix: str  # where MTP layer {k}'s block lives; {index} = offset + k
    parts: tuple[tuple[str, str], ...]  # (checkpoint name, module part) of the wrapper
    # The defaults below are the usual case; each layout states where it departs from it.
    offset_by_target: bool = False  # {index} = num_hidden_layers + k (else k)
    wrapper_prefix: str = ""  # where the wrapper's weights live ("" = under the block's prefix)
    stored_copies: tuple[str, ...] = ()  # names under the block prefix that copy the target's
    # weights (DeepSeek's `embed_tokens`): recognised, not read; the target's is used
    hidden_first: bool = False  # the projection reads cat(hidden, embedding), not the reverse
    normed_output: bool = True  # the state fed back (and drafted from) is after the output norm
    zero_first_position: bool = True  # the embedding of the row at position 0 is zeroed
    prenorm_feature: bool = False  # h_prev is the target's last hidden state before its final norm

    def block_index(self, target_layers: int, k: int) -> int:
        return target_layers * self.offset_by_target + k

    def checkpoint_name(self, name: str, target_layers: int, k: int = 0) -> str:
        """The checkpoint key of module tensor `name` of MTP layer k (module_name reversed;
        stacked experts keep transformers' name)."""
        part, _, rest = name.partition(".")
        block = self.block_prefix.format(index=self.block_index(target_layers, k))
        for checkpoint, module in self.parts:
            if module == part:
                return f"{self.wrapper_prefix or block}{checkpoint}.{rest}"
        return block + rest

    def module_name(self, key: str, target_layers: int) -> tuple[int, str] | None:
        """(MTP layer k, the module's name) of a checkpoint key in this layout, or None
        when the key is not one of its MTP weights. Stored copies map to ''."""
        if self.wrapper_prefix and key.startswith(self.wrapper_prefix):
            rest = key.removeprefix(self.wrapper_prefix)
            for name, part in self.parts:
                if rest.startswith(name + "."):
                    return 0, part + rest.removeprefix(name)
        match = _BLOCK[self.name].match(key)
        if match is None:
            return None
        k = int(match.group(1)) - target_layers * self.offset_by_target
        if k < 0:
            return None  # a target layer
        rest = key[match.end() :]
        if not self.wrapper_prefix:
            for name, part in self.parts:
                if rest.startswith(name + "."):
                    return k, part + rest.removeprefix(name)
        if any(rest.startswith(name + ".") for name in self.stored_copies):
            return k, ""
        return k, f"{BLOCK}.{rest}"


def wrapper_parts(
    embedding_norm: str, hidden_norm: str, projection: str, output_norm: str, head: str = ""
) -> tuple[tuple[str, str], ...]:
    """A layout's checkpoint names of the wrapper's parts, paired with the module's parts."""
    named = zip(
        (embedding_norm, hidden_norm, projection, output_norm, head),
        (EMBEDDING_NORM, HIDDEN_NORM, PROJECTION, OUTPUT_NORM, HEAD),
        strict=True,
    )
    return tuple((name, part) for name, part in named if name)


DEEPSEEK = MtpLayout(
    name="deepseek",
    families="DeepSeek-V3, GLM-4.5",
    block_prefix="model.layers.{index}.",
    parts=wrapper_parts("enorm", "hnorm", "eh_proj", "shared_head.norm", "shared_head.head"),
    offset_by_target=True,
    stored_copies=("embed_tokens",),
    normed_output=False,
)
QWEN3_NEXT = MtpLayout(
    name="qwen3_next",
    families="Qwen3-Next, Qwen3.5",
    block_prefix="mtp.layers.{index}.",
    parts=wrapper_parts("pre_fc_norm_embedding", "pre_fc_norm_hidden", "fc", "norm"),
    wrapper_prefix="mtp.",
    zero_first_position=False,
)
MIMO = MtpLayout(
    name="mimo",
    families="MiMo",
    block_prefix="model.mtp_layers.{index}.",
    parts=wrapper_parts("token_layernorm", "hidden_layernorm", "input_proj", "final_layernorm"),
    hidden_first=True,
    prenorm_feature=True,
)
LAYOUTS = (DEEPSEEK, QWEN3_NEXT, MIMO)
# each layout's block prefix as a pattern: the {index} matched and captured
_BLOCK = {
    layout.name: re.compile("^" + re.escape(layout.block_prefix).replace(r"\{index\}", r"(\d+)"))
    for layout in LAYOUTS
}


def is_mtp_key(key: str, target_layers: int) -> bool:
    """Is `key` (a checkpoint name) an MTP weight in some layout: `mtp.*`,
    `model.mtp_layers.*`, or a `model.layers.{i}.*` past the target's last layer?"""
    if key.startswith(("mtp.", "model.mtp_layers.")):
        return True
    match = _BLOCK["deepseek"].match(key)
    return match is not None and int(match.group(1)) >= target_layers


def layouts_of(keys: Iterable[str], target_layers: int) -> list[MtpLayout]:
    """The layouts whose MTP weights appear among `keys` (empty: the model has none)."""
    found = [key for key in keys if is_mtp_key(key, target_layers)]
    return [
        layout
        for layout in LAYOUTS
        if any(layout.module_name(key, target_layers) is not None for key in found)
    ]


def stated_count(config: dict) -> int | None:
    """How many MTP layers a config.json says the checkpoint has, if it says:
    `num_nextn_predict_layers` (DeepSeek-V3, GLM-4.5, MiMo, Qwen3-Next) or
    `mtp_num_hidden_layers` (Qwen3.5)."""
    for name in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
        if config.get(name) is not None:
            return int(config[name])
    return None

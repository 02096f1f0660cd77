"""The model a training run starts from, built around the target (it shares the target's
embedding and lm_head, which it does not train).

- EAGLE-1 head: it starts as "the next feature is this one": fc passes f_t through, the layers'
  output projections are scaled down (the target's feature scale is ~2; a random layer is far
  off). `layers` > 1 stacks decoder layers (the official EAGLE-1 code allows it); a trained
  head grown by extra layers (`--init HEAD --layers N`) starts with their output projections
  at zero, so it drafts exactly as the head it grew from until training moves them.
- EAGLE-3 head: fc passes the highest of the three fused layers through, its norm and lm_head
  are copied from the target's final norm and lm_head rows, the output projections scaled down.
  Started from an EAGLE-1 head (`--init HEAD --arch eagle3`) its midlayer takes that head's
  layer where the shapes allow (`eagle1_layer_into_midlayer`): the MLP, the output projection
  and the post-attention norm as they are, and q / k / v composed with the EAGLE-1 fc, so that
  the midlayer's projections of [token embedding; state] are the EAGLE-1 layer's projections of
  fc([token embedding; feature]) (less fc's bias); the draft vocabulary is the head's.
- token-level draft (docs/architecture.md#token-level-draft): one decoder layer on the target's
  frozen embedding, its own final norm, the target's lm_head; it starts from the target's first
  layer and final norm. Saved as a LlamaForCausalLM config with only its own weights (layer +
  norm, ~7 MB fp16); the embedding / tied lm_head are copied from the target at load time
  (`token_draft.load_draft_dir`), which keeps the bundled file small.

The draft vocabulary of a fresh model is the most frequent tokens of its training data.
"""

from __future__ import annotations

import torch
from torch import nn

from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.head import OFFICIAL, Eagle3Variant, EagleHead, head_config
from specdec_core.models.loading import LoadedModel
from specdec_core.training.online_features import Sequences

VOCAB_MAPS = ("d2t", "t2d")  # an EAGLE head's draft-vocabulary buffers (EAGLE-3's names)


def starting_model(
    trains: str,
    init_head: EagleHead | None,
    target: LoadedModel,
    data: Sequences,
    draft_vocab: int,
    arch: str = "eagle1",
    layers: int = 1,
    input_norms: bool = False,
    repick_vocab: bool = False,
) -> tuple[nn.Module, torch.Tensor]:
    """-> (model to train, its draft vocabulary's target ids), on the target's device.

    With `init_head` (`read_init`): its layout, weights and draft vocabulary (`repick_vocab`,
    an EAGLE-1 head only: the `draft_vocab` most frequent tokens of `data` instead); `layers`
    (`resolve_layers`) more than it has grows it by layers whose output projections are zero
    (it drafts as before until trained). Without: a fresh model (layout `arch`, `layers`
    decoder layers; `input_norms`: EAGLE 3.1's RMSNorm per fused target state before `fc`)
    on the `draft_vocab` most frequent tokens of `data` (0 = all).
    """
    vocab = target.vocab_size
    if init_head is None or repick_vocab:  # counted over the data only when it picks them
        frequent = frequent_tokens(data, min(draft_vocab or vocab, vocab), vocab)
        draft_ids = frequent.to(target.device)
    if init_head is None:
        variant = Eagle3Variant(fc_norm=True) if input_norms else OFFICIAL
        return build_model(trains, target.model, draft_ids, arch, layers, variant), draft_ids
    if not repick_vocab:
        draft_ids = init_head.draft_ids()
    if init_head.kind != arch:  # an EAGLE-1 head starting a fresh EAGLE-3 head
        model = build_model(trains, target.model, draft_ids, arch, 1)
        eagle1_layer_into_midlayer(init_head, model)
        return model, draft_ids
    have = head_layers(init_head)
    layers = max(layers, have)
    model = build_model(trains, target.model, draft_ids, init_head.kind, layers, init_head.variant)
    state = init_head.state_dict()
    if repick_vocab:  # the vocabulary's maps come from the data, the weights from the head
        state = {key: value for key, value in state.items() if key not in VOCAB_MAPS}
    missing, _ = model.load_state_dict(state, strict=False)
    missing = [key for key in missing if key not in VOCAB_MAPS]
    if layers > have:
        with torch.no_grad():
            for layer in model.layers[have:]:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
    elif missing:
        raise SpecdecError(f"the --init head lacks weights: {', '.join(missing[:4])}")
    return model, draft_ids


def build_model(
    trains: str,
    target,
    draft_ids: torch.Tensor,
    arch: str = "eagle1",
    layers: int = 1,
    variant: Eagle3Variant = OFFICIAL,
) -> nn.Module:
    """A fresh EAGLE head (eagle, layout `arch`, `layers` decoder layers for eagle1, an
    EAGLE-3 `variant` such as EAGLE 3.1's input norms) or one-layer LlamaForCausalLM (draft),
    initialised from the target (see the module docstring), in float32 for training."""
    from transformers import LlamaForCausalLM

    config = head_config(target.config, num_hidden_layers=1)
    if trains == "eagle":
        head = EagleHead(
            config, kind=arch, bias=True, draft_vocab=len(draft_ids), layers=layers,
            variant=variant,
        )  # fmt: skip
        h = config.hidden_size
        with torch.no_grad():
            if arch == "eagle1":  # "the next feature is this feature": fc passes f_t
                head.fc.weight[:, h:] = torch.eye(h)
                head.fc.bias.zero_()
            else:  # fc passes the highest fused layer; the target's norm and lm_head rows
                head.fc.weight.zero_()
                head.fc.weight[:, 2 * h :] = torch.eye(h)
                head.norm.weight.copy_(target.model.norm.weight)
                rows = target.get_output_embeddings().weight[draft_ids.to(target.device)]
                head.lm_head.weight.copy_(rows)
            for layer in head.layers if arch == "eagle1" else [head.midlayer]:
                layer.self_attn.o_proj.weight.mul_(0.1)
                layer.mlp.down_proj.weight.mul_(0.1)
        head.set_draft_vocab(draft_ids)
        head = head.float().to(target.device)
        return head.bind(target.get_input_embeddings(), target.get_output_embeddings())
    config.tie_word_embeddings = True
    draft = LlamaForCausalLM(config)
    draft.model.layers[0].load_state_dict(target.model.layers[0].state_dict())
    draft.model.norm.load_state_dict(target.model.norm.state_dict())
    draft.model.embed_tokens = target.get_input_embeddings()
    draft.lm_head = target.get_output_embeddings()
    return draft.float().to(target.device)


@torch.no_grad()
def eagle1_layer_into_midlayer(eagle1: EagleHead, eagle3: EagleHead) -> None:
    """Start `eagle3`'s midlayer from `eagle1`'s (first) decoder layer where shapes allow: the
    MLP, o_proj and post-attention norm copied; q / k / v (over [embedding; state], 2h wide)
    composed with the EAGLE-1 fc (over [embedding; feature]): W3 = W1 · fc."""
    source, midlayer = eagle1.layers[0], eagle3.midlayer
    fc = eagle1.fc.weight.float()  # [h, 2h]
    for name in ("q_proj", "k_proj", "v_proj"):
        weight = getattr(source.self_attn, name).weight.float()  # [out, h]
        getattr(midlayer.self_attn, name).weight.copy_(weight @ fc)
    midlayer.self_attn.o_proj.weight.copy_(source.self_attn.o_proj.weight)
    midlayer.mlp.load_state_dict(source.mlp.state_dict())
    midlayer.post_attention_layernorm.load_state_dict(source.post_attention_layernorm.state_dict())


def trainable(model: nn.Module, trains: str) -> list[nn.Parameter]:
    """The parameters training updates: the model's own, not the target's it is built on."""
    if trains == "eagle":
        return list(model.parameters())  # embedding / lm_head are bound, not owned
    return list(model.model.layers.parameters()) + list(model.model.norm.parameters())


def frequent_tokens(data: Sequences, size: int, vocab: int) -> torch.Tensor:
    """The `size` most frequent token ids of the data (sorted ascending): the draft vocabulary
    (of equally frequent tokens, the lower ids)."""
    counts = torch.from_numpy(data.token_counts(vocab))
    order = torch.sort(-counts, stable=True).indices  # most frequent first, ties by id
    return torch.sort(order[:size]).values


def head_layers(model: nn.Module) -> int:
    """Decoder layers of an EAGLE head or a token-level draft, as its config counts them (an
    EAGLE-3 head's midlayer counts as one)."""
    return int(model.config.num_hidden_layers)

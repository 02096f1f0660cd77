"""`specdec train`: data -> target features -> training -> a saved head / draft with a card.

Everything expensive is cached under `--work` (default OUT/work) and reused by a rerun:
generated answers (self-distillation) and feature shards. Conversations are split once
(seeded): 64 are held out for validation; ShareGPT answers come from conversations
4096..8191 of the rest, prompts for self-distillation from all the others (first 0..4095, then
8192 onwards), so the two sources never overlap.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

from specdec_core.eagle import data as datasets
from specdec_core.eagle.features import Featured, extract_features
from specdec_core.eagle.head import fused_layers
from specdec_core.eagle.train import (
    Objective,
    TrainConfig,
    build_model,
    frequent_tokens,
    teacher_forced_agreement,
    train,
)
from specdec_core.errors import SpecdecError
from specdec_core.models import LoadedModel, load_model

HOLDOUT = 64
SHAREGPT = slice(4096, 8192)  # the conversations used as ShareGPT answers
# self-distillation prompt lengths (tokens, chat template included): `self` answers the short
# first prompts; `self-long` the long ones (articles to summarise, code to review), so the head
# also learns to attend over the distances that long-document prompts need
SELF_PROMPTS = {"self": (1, 256), "self-long": (257, 1024)}


def _log(message: str) -> None:
    print(f"[train] {message}", file=sys.stderr, flush=True)


def collect(
    source: str,
    target: LoadedModel,
    tokens: int,
    work: Path,
    max_len: int,
    seed: int,
    cached_only: bool = False,
):
    """Samples from one source until about `tokens` tokens; plus held-out samples / prompts."""
    tok = target.tokenizer
    if source.endswith(".jsonl"):
        return _jsonl(source, target, tokens, work, max_len), [], []
    if source.endswith(".npz"):
        return _answers(source, tokens, max_len), [], []
    if source not in ("sharegpt", *SELF_PROMPTS):
        raise SpecdecError(
            f"unknown --data '{source}'; use sharegpt, self, self-long, FILE.jsonl or FILE.npz"
        )
    conversations = list(datasets.iter_sharegpt())
    rest, held = datasets.split_conversations(len(conversations), HOLDOUT, seed)
    rendered = (datasets.render_conversation(tok, conversations[i], max_len) for i in held)
    held_samples = [s for s in rendered if s][:16]  # teacher-forced agreement
    held_prompts = [
        p for p in (datasets.first_prompt(tok, conversations[i], 256) for i in held) if p
    ]
    samples: list[datasets.Sample] = []
    if source == "sharegpt":
        for i in rest[SHAREGPT]:
            sample = datasets.render_conversation(tok, conversations[i], max_len)
            if sample is not None:
                samples.append(sample)
                if sum(len(s.ids) for s in samples) >= tokens:
                    break
        return samples, held_samples, held_prompts
    chunk = 512
    order = rest[: SHAREGPT.start] + rest[SHAREGPT.stop :]
    shortest, longest = SELF_PROMPTS[source]
    for number, first in enumerate(range(0, len(order), chunk)):
        ids = order[first : first + chunk]
        found = (datasets.first_prompt(tok, conversations[i], longest) for i in ids)
        prompts = [p for p in found if p and len(p) >= shortest]
        if not prompts:
            continue
        samples += datasets.generate_answers(
            target.model,
            tok,
            prompts,
            128,
            64,
            work / source / f"chunk-{number:04d}",
            progress=lambda n, total, made: _log(
                f"self-distillation batch {n}/{total}: {made} tokens"
            ),
            budget=tokens - sum(len(s.ids) for s in samples),
            cached_only=cached_only,
        )
        if sum(len(s.ids) for s in samples) >= tokens:
            break
    # validate on what the head will see: the target's own answers to held-out prompts
    held_answers = datasets.generate_answers(
        target.model, tok, held_prompts[:32], 128, 32, work / "self-heldout"
    )
    return samples, held_answers or held_samples, held_prompts


def _answers(path: str, tokens: int, max_len: int) -> list[datasets.Sample]:
    """Answers saved by `datasets.save_answers` (scripts/gpu_distill.py), up to `tokens`."""
    samples, total = [], 0
    for saved in datasets.load_answers(path):
        sample = datasets.Sample(saved.ids[:max_len], saved.start)
        if len(sample.ids) > sample.start + 1:
            samples.append(sample)
            total += len(sample.ids)
            if total >= tokens:
                break
    return samples


def _jsonl(path: str, target: LoadedModel, tokens: int, work: Path, max_len: int):
    samples, prompts = [], []
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if "text" in record:
            ids = target.tokenizer(record["text"])["input_ids"][:max_len]
            samples.append(datasets.Sample(ids, 0))
        else:
            text = record.get("prompt") or record["turns"][0]
            messages = [{"from": "human", "value": text}]
            prompt = datasets.first_prompt(target.tokenizer, messages, 256)
            if prompt:
                prompts.append(prompt)
    if prompts:
        samples += datasets.generate_answers(
            target.model, target.tokenizer, prompts, 128, 64, work / "jsonl"
        )
    kept, total = [], 0
    for sample in samples:
        kept.append(sample)
        total += len(sample.ids)
        if total >= tokens:
            break
    return kept


def run_training(args) -> dict:
    """The `specdec train` command body; returns the model card."""
    started = time.time()
    out = Path(args.out)
    work = Path(args.work) if args.work else out / "work"
    sources = [s.strip() for s in args.data.split(",") if s.strip()]
    budgets = [int(float(t)) for t in str(args.tokens).split(",")]
    if len(budgets) == 1:
        budgets = budgets * len(sources)
    if len(budgets) != len(sources):
        raise SpecdecError("--tokens takes one number, or one per --data source (comma-separated)")
    torch.manual_seed(args.seed)
    target = load_model(args.target, args.device, args.feature_dtype)
    for p in target.model.parameters():
        p.requires_grad_(False)
    init_head = read_init(args.kind, getattr(args, "init", None), target)
    arch = resolve_arch(args.kind, getattr(args, "arch", None), init_head)
    depth = resolve_layers(args.kind, arch, init_head, getattr(args, "layers", None))
    fused = input_layers(arch, target)  # target layers the features hold (not the head's)
    suffix = "-eagle3" if fused else ""  # EAGLE-3 shards also hold the fused layers
    data: list[Featured] = []
    held: list[Featured] = []
    held_prompts: list[list[int]] = []
    for source, budget in zip(sources, budgets, strict=True):
        samples, held_samples, prompts = collect(
            source, target, budget, work, args.max_len, args.seed, args.cached_only
        )
        name = Path(source).stem if source.endswith((".jsonl", ".npz")) else source
        _log(f"{name}: {len(samples)} sequences, {sum(len(s.ids) for s in samples)} tokens")
        data += extract_features(
            target.model,
            samples,
            work / f"features-{name}{suffix}",
            progress=lambda n, total, made: _log(f"features {n}/{total} sequences: {made} tokens"),
            layers=fused,
        )
        if held_samples and not held:
            held = extract_features(
                target.model, held_samples, work / f"features-heldout{suffix}", layers=fused
            )
            held_prompts = prompts
    if not data:
        raise SpecdecError("no training data; check --data and --tokens")
    config = TrainConfig(
        kind=args.kind,
        epochs=args.epochs,
        lr=args.lr,
        batch_tokens=args.batch_tokens,
        draft_vocab=args.draft_vocab,
        seed=args.seed,
        unroll=args.unroll,
        **layout_settings(arch, getattr(args, "ce_weight", None)),
    )
    model, draft_ids = starting_model(
        config.kind, init_head, target, data, config.draft_vocab, arch, depth
    )
    lm_head = target.model.get_output_embeddings()
    noise = config.noise if config.kind == "eagle" else 0.0
    unroll = config.unroll if config.kind == "eagle" else 1
    objective = Objective(config.kind, model, lm_head, draft_ids, noise, unroll)

    def validate(objective: Objective) -> dict:
        result = {"teacher_forced_top1": teacher_forced_agreement(objective, held, lm_head)}
        if held_prompts and args.val_prompts:
            result["tau"] = validation_tau(
                config.kind, objective.model, target, held_prompts[: args.val_prompts]
            )
        return result

    out.mkdir(parents=True, exist_ok=True)
    history = train(objective, data, config, out, validate if held else None)
    tokens = sum(len(item.ids) for item in data)
    card = {
        "kind": config.kind,
        "target": args.target,
        "command": "specdec " + " ".join(sys.argv[1:])
        if sys.argv[0].endswith("specdec")
        else " ".join(sys.argv),
        "data": sources,
        "tokens": tokens,
        "sequences": len(data),
        "epochs": config.epochs,
        "seed": args.seed,
        "draft_vocab": len(draft_ids),
        "init": getattr(args, "init", None),
        "layers": head_layers(model),
        "history": history,
        "validation": history[-1] if history else None,
        "train_seconds": round(time.time() - started),
        "train_config": {k: v for k, v in vars(config).items() if k != "extra"},
    }
    save(config.kind, model, target, out, card)
    return card


def layout_settings(arch: str, ce_weight: float | None) -> dict:
    """TrainConfig fields that follow the layout: EAGLE-3 has no input noise and only the token
    loss (weight 1); EAGLE-1 weighs it 0.1 beside the feature loss. --ce-weight overrides."""
    eagle3 = arch == "eagle3"
    default = 1.0 if eagle3 else TrainConfig.ce_weight
    return {
        "arch": arch,
        "ce_weight": default if ce_weight is None else ce_weight,
        "noise": 0.0 if eagle3 else TrainConfig.noise,
    }


def read_init(kind: str, init: str | None, target: LoadedModel):
    """The --init head, read once in float32 (not through a bf16 target's rounding), or None."""
    if not init:
        return None
    if kind != "eagle":
        raise SpecdecError("--init continues an EAGLE head; drop it for `specdec train draft`")
    from specdec_core.runner import load_head

    head = load_head(init, target, torch.float32)
    if not head.draft_vocab:
        raise SpecdecError(
            f"--init {init}: the trainer continues heads with a reduced draft vocabulary "
            "(d2t / t2d); this one drafts over the full vocabulary"
        )
    return head


def resolve_arch(kind: str, arch: str | None, init_head) -> str:
    """The head layout to train: --arch, else the --init head's (`read_init`), else eagle1."""
    if kind != "eagle":
        if arch:
            raise SpecdecError("--arch chooses an EAGLE head's layout; drop it for `train draft`")
        return "eagle1"
    if init_head is None:
        return arch or "eagle1"
    if arch and arch != init_head.kind:
        raise SpecdecError(
            f"the --init head is an {init_head.kind} head, so it cannot continue as --arch "
            f"{arch}; drop --arch, or drop --init to train a fresh {arch} head"
        )
    return init_head.kind


def input_layers(arch: str, target: LoadedModel) -> tuple[int, ...]:
    """Target hidden states the features must hold besides the last one (EAGLE-3's fused)."""
    return fused_layers(target.model.config.num_hidden_layers) if arch == "eagle3" else ()


def starting_model(
    kind: str, init_head, target: LoadedModel, data, draft_vocab: int, arch="eagle1", layers=1
):
    """-> (model to train, its draft vocabulary's target ids), on the target's device.

    With `init_head` (`read_init`): its layout, weights and draft vocabulary; `layers`
    (`resolve_layers`) more than it has grows it by layers whose output projections are zero
    (it drafts as before until trained). Without: a fresh model (layout `arch`, `layers`
    decoder layers) on the `draft_vocab` most frequent tokens of `data` (0 = all).
    """
    vocab = target.vocab_size
    if init_head is None:
        if arch == "eagle3" and not draft_vocab:
            raise SpecdecError("an EAGLE-3 head needs a reduced draft vocabulary: --draft-vocab N")
        draft_ids = frequent_tokens(data, min(draft_vocab or vocab, vocab), vocab)
        draft_ids = draft_ids.to(target.device)
        return build_model(kind, target.model, draft_ids, arch, layers), draft_ids
    draft_ids = init_head.draft_ids()
    have = head_layers(init_head)
    layers = max(layers, have)
    model = build_model(kind, target.model, draft_ids, init_head.kind, layers)
    missing, _ = model.load_state_dict(init_head.state_dict(), strict=False)
    if layers > have:
        with torch.no_grad():
            for layer in model.layers[have:]:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
    elif missing:
        raise SpecdecError(f"the --init head lacks weights: {', '.join(missing[:4])}")
    return model, draft_ids


def resolve_layers(kind: str, arch: str, init_head, layers: int | None) -> int:
    """The decoder layers to train (--layers, else the --init head's, else 1); checked before
    any data is collected."""
    if layers is not None and kind != "eagle":
        raise SpecdecError("--layers sizes an EAGLE head; drop it for `specdec train draft`")
    have = head_layers(init_head) if init_head is not None else 1
    layers = have if layers is None else layers
    if arch == "eagle3" and layers != 1:
        raise SpecdecError(
            "an EAGLE-3 head has exactly one decoder layer (its midlayer); drop --layers, or "
            "use --arch eagle1 for a deeper head"
        )
    if layers < 1:
        raise SpecdecError(f"--layers {layers}: a head needs at least one decoder layer")
    if init_head is not None and layers < have:
        raise SpecdecError(
            f"the --init head has {have} decoder layers; --layers can add layers, not remove "
            f"them: give --layers {have} or more, or drop --init to train a fresh head"
        )
    return layers


def head_layers(model) -> int:
    """Decoder layers of a model being trained (an EAGLE-3 head's midlayer counts as one)."""
    layers = getattr(model, "layers", None)
    return len(layers) if layers is not None else 1


def save(kind: str, model, target: LoadedModel, out: Path, card: dict) -> None:
    if kind == "eagle":
        from specdec_core.eagle.formats import save_head

        save_head(model, out, card)
    else:
        from specdec_core.token_draft import save_draft

        save_draft(model, target.tokenizer, out, card)
    _log(f"saved {kind} to {out}")


@torch.no_grad()
def validation_tau(
    kind: str,
    model,
    target: LoadedModel,
    prompts: list[list[int]],
    k: int = 4,
    max_new_tokens: int = 48,
) -> float:
    """Mean acceptance length of real greedy decoding on held-out prompts."""
    from specdec_core.config import DecodeConfig
    from specdec_core.decode import generate
    from specdec_core.drafters.classic import ClassicDrafter
    from specdec_core.drafters.eagle import EagleDrafter
    from specdec_core.events import Finished

    model.eval()
    if kind == "eagle":
        drafter = EagleDrafter(model, target.model.config.num_hidden_layers)
    else:
        drafter = ClassicDrafter(model, target.vocab_size)
    new = steps = 0
    config = DecodeConfig(max_new_tokens=max_new_tokens, k=k)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=target.device.type == "cpu"):
        for prompt in prompts:
            for event in generate(target, drafter, prompt, config):
                if isinstance(event, Finished):
                    new += event.summary.new_tokens
                    steps += event.summary.steps
    model.train()
    return new / max(1, steps)

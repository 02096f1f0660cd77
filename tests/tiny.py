"""Tiny random causal LMs with a real (word-level) tokenizer, for fast exact engine tests.

Logits are sharpened (a scaled lm_head) so that distributions are far from uniform and a
different seed gives a genuinely different draft: acceptance is partial, which exercises
both the accept and the reject branches.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from specdec_core.models.loading import LoadedModel
from specdec_core.run.runner import RunSummary, run

VOCAB = 32
SPECIAL = ["<unk>", "<s>", "</s>"]  # ids 0, 1, 2; </s> is EOS
# the tiny vocabulary has no role words: turns are told apart by position
CHAT_TEMPLATE = (
    "{% for m in messages %}<s> {{ m['content'] }} </s> {% endfor %}"
    "{% if add_generation_prompt %}<s> {% endif %}"
)
EVALUATION_PROMPT = "w1 w2 w3 w4 w5 w6 w7 w8"  # what `tiny_conversation` sometimes asks


def tiny_tokenizer(chat: bool = False) -> PreTrainedTokenizerFast:
    """The word-level tokenizer of `VOCAB` words; `chat`: with `CHAT_TEMPLATE`."""
    words = SPECIAL + [f"w{i}" for i in range(VOCAB - len(SPECIAL))]
    model = WordLevel({word: i for i, word in enumerate(words)}, unk_token="<unk>")
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    if chat:
        fast.chat_template = CHAT_TEMPLATE
    return fast


def _words(rng: random.Random, n: int) -> str:
    return " ".join(f"w{rng.randrange(3, VOCAB - 3)}" for _ in range(n))


def tiny_conversation(rng: random.Random, index: int) -> dict:
    """A ShareGPT-like conversation: one or two turns, some asking for code, some with a long
    answer (the `long` source), some asking `EVALUATION_PROMPT` or nearly that."""
    turns = [{"from": "human", "value": _words(rng, 6)}, {"from": "gpt", "value": _words(rng, 9)}]
    if index % 3 == 0:
        turns += [{"from": "human", "value": _words(rng, 5)}, {"from": "gpt", "value": "w3"}]
    if index % 7 == 0:
        turns[0]["value"] = "write python code " + _words(rng, 5)
    if index % 4 == 0:  # an article to summarise (the `long` source)
        turns[1]["value"] = _words(rng, 160)
    if index % 11 == 0:
        turns[0]["value"] = EVALUATION_PROMPT  # an evaluation prompt, word for word
    if index % 13 == 0:
        turns[0]["value"] = "please " + EVALUATION_PROMPT.upper() + " thanks"  # one nearly like it
    return {"conversations": turns}


def chat_target(root: Path, conversations: int = 0) -> Path:
    """`root/target`: a tiny model (seed 1) and its tokenizer with `CHAT_TEMPLATE`; with
    `conversations`, also `root/chats.json` of that many `tiny_conversation`s; -> root/target."""
    tiny_model(1).save_pretrained(root / "target")
    tiny_tokenizer(chat=True).save_pretrained(root / "target")
    if conversations:
        rng = random.Random(0)
        chats = [tiny_conversation(rng, i) for i in range(conversations)]
        (root / "chats.json").write_text(json.dumps(chats))
    return root / "target"


def tiny_config_fields(hidden: int = 32) -> dict:
    """The sizes and token ids of every tiny model, whatever its architecture (no layer count)."""
    return dict(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )


def tiny_config(layers: int = 2, hidden: int = 32) -> LlamaConfig:
    return LlamaConfig(num_hidden_layers=layers, **tiny_config_fields(hidden))


def training_dir(root, layers: int = 2, prompts: tuple[str, ...] = ()):
    """`root/target` (a tiny model and tokenizer) and `root/data.jsonl`: 40 random 30-word
    texts, then `prompts` (JSON lines) for the target to answer; -> root."""
    tiny_model(1, layers=layers).save_pretrained(root / "target")
    tiny_tokenizer().save_pretrained(root / "target")
    generator = torch.Generator().manual_seed(0)
    lines = []
    for _ in range(40):
        words = torch.randint(3, VOCAB, (30,), generator=generator).tolist()
        lines.append(json.dumps({"text": " ".join(f"w{w - 3}" for w in words)}))
    (root / "data.jsonl").write_text("\n".join([*lines, *prompts]))
    return root


def tiny_model(seed: int, layers: int = 2, sharpness: float = 4.0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_config(layers)).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpness)
        model.lm_head.weight[2] = 0.0  # EOS logit 0: rarely the argmax, so runs are long
    model.generation_config.eos_token_id = 2
    return model


def perturbed(model: LlamaForCausalLM, noise: float, seed: int) -> LlamaForCausalLM:
    """A copy of `model` with Gaussian noise (relative to each tensor's std): a draft that
    agrees with the target often but not always."""
    torch.manual_seed(seed)
    copy = LlamaForCausalLM(model.config).eval()
    copy.load_state_dict(model.state_dict())
    with torch.no_grad():
        for param in copy.parameters():
            param.add_(torch.randn_like(param) * noise * param.std().clamp(min=1e-3))
    copy.generation_config.eos_token_id = 2
    return copy


def tiny_loaded(seed: int, layers: int = 2, model: LlamaForCausalLM | None = None) -> LoadedModel:
    return LoadedModel(
        model=model if model is not None else tiny_model(seed, layers),
        tokenizer=tiny_tokenizer(),
        spec=f"tiny-{seed}",
        source="memory",
        device=torch.device("cpu"),
        dtype=torch.float32,
    )


def prompt(length: int = 5, offset: int = 3) -> list[int]:
    return [1] + [3 + (offset + 7 * i) % (VOCAB - 3) for i in range(length - 1)]


def ar_and(target, method: str, ids, config, extra=None) -> tuple[RunSummary, RunSummary]:
    """`ar`'s run, then `method`'s (`extra`: its draft or head), on the same prompt and config."""
    return run(target, "ar", ids, config), run(target, method, ids, config, extra)

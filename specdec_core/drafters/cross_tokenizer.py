"""Classic drafting with a draft model whose tokenizer is not the target's.

The draft reads the committed *text*: the target's committed ids decoded, then written with
the draft's tokenizer (`DraftContext`). The prompt is written once; the generated text is
re-written each step from the last few draft tokens on (the boundary of the last token moves
when text is appended: "hel" becomes "hello"), the older draft tokens stay as they were. The
draft's KV cache is kept for the longest common prefix of the ids it has seen and the new
ones, and only the rest is fed.

Two algorithms draft from that context:

- **Universal assisted generation** (T = 0; as transformers' assisted generation with
  different tokenizers): the draft continues the text greedily for k draft tokens over its
  whole vocabulary; the new text is written with the target's tokenizer after the last
  committed target ids (`target_continuation`: the target's tokenization of their text plus
  the new text, minus those ids; where the new text merges into them, the new text written on
  its own, cut to the part that decodes back to it). The chain is proposed as deterministic
  (q None): the greedy verification keeps exactly the target's greedy output.
- **Token-level intersection** (Timor et al. 2025, "Accelerating LLM Inference with Lossless
  Speculative Decoding Algorithms for Heterogeneous Vocabularies", ICML 2025): the draft's
  distribution restricted to the tokens whose text is one target token's text
  (vocabulary_map.py) and renormalised; temperature and top-p are applied to it as to the
  target. The draft samples from it, feeds its own id on, and proposes the target id of the
  same text with its row expressed over the target's vocabulary (zero outside the shared
  tokens), so the lossless rule (verifiers/lossless.py) keeps the target's distribution
  exactly. At T = 0 it is the argmax over the shared tokens.

Choice rule (`draft_algorithm`): a draft with the target's tokenizer is `ClassicDrafter`;
otherwise `CrossTokenizerDrafter` decides per step from `config.temperature`: universal
assisted generation at T = 0 (it drafts any text, not only shared tokens;
docs/cross-tokenizer.md compares the two), token-level intersection at T > 0 (the only one of
the two with draft distributions to verify against). Each step's time splits into the draft's
forwards ("forwards") and the text's re-writing both ways ("retokenize", `draft_parts`).
"""

from __future__ import annotations

import enum

import torch
from transformers import PreTrainedModel

from specdec_core.decoding import kv_cache
from specdec_core.decoding.config import DecodeConfig, is_greedy
from specdec_core.decoding.detokenize import IncrementalDetokenizer
from specdec_core.decoding.proposal import Proposal
from specdec_core.decoding.sampling import probs, sample
from specdec_core.decoding.step_clock import now
from specdec_core.decoding.target import TargetOutput
from specdec_core.drafters.classic import ClassicDrafter, tokenizers_match
from specdec_core.drafters.vocabulary_map import VocabularyMap, vocabulary_map
from specdec_core.errors import SpecdecError
from specdec_core.loop.drafter import Drafter
from specdec_core.models.loading import LoadedModel

LOOKBEHIND = 4  # ids before new text that are decoded and re-encoded with it
LIVE = 16  # generated draft tokens re-written every step (twice as many before older ones stay)


class Algorithm(enum.Enum):
    SAME = "same tokenizer"
    UAG = "universal assisted generation (T = 0)"
    TLI = "token-level intersection (T > 0)"


def draft_algorithm(target_tokenizer, draft_tokenizer, temperature: float) -> str:
    """What a classic draft with `draft_tokenizer` drafts with at `temperature`, in words."""
    if tokenizers_match(target_tokenizer, draft_tokenizer):
        return Algorithm.SAME.value
    return (Algorithm.UAG if is_greedy(temperature) else Algorithm.TLI).value


def draft_pairing(target_tokenizer, draft_tokenizer) -> str:
    """How a classic draft with `draft_tokenizer` drafts for this target at any temperature, in
    words (the window says it when the draft loads)."""
    if tokenizers_match(target_tokenizer, draft_tokenizer):
        return f"{Algorithm.SAME.value}: its drafts are verified as they are"
    return (
        f"another tokenizer: {Algorithm.UAG.value.removesuffix(' (T = 0)')} at T = 0, "
        f"{Algorithm.TLI.value.removesuffix(' (T > 0)')} at T > 0"
    )


def build_classic(
    target: LoadedModel, draft: LoadedModel, history=None, costs=None, acceptance=None
) -> Drafter:
    """The classic method's drafter: `ClassicDrafter` for a draft with the target's tokenizer,
    `CrossTokenizerDrafter` for any other (the registry's builder signature)."""
    if not isinstance(draft, LoadedModel):
        raise SpecdecError("the classic method needs a draft model; pass --draft SPEC")
    if tokenizers_match(target.tokenizer, draft.tokenizer):
        return ClassicDrafter(draft.model, target.vocab_size)
    return CrossTokenizerDrafter(draft.model, draft.tokenizer, target.tokenizer, target.vocab_size)


class DraftContext:
    """The draft's token ids for the text of the target's committed ids.

    The prompt's text is written once (with the draft's own BOS where its tokenizer adds
    one); generated text is appended as the target commits it (whole characters only) and
    written from `LIVE` to `2 * LIVE` draft tokens back each time; older tokens are frozen
    once the text they decode to is exactly the start of the text still being written.
    """

    def __init__(self, target_tokenizer, draft_tokenizer) -> None:
        self.target_tokenizer = target_tokenizer
        self.draft_tokenizer = draft_tokenizer
        self.prefix: list[int] = []  # the prompt, written by the draft's tokenizer
        self.frozen: list[int] = []  # generated text that is no longer re-written
        self.live = ""  # generated text after `frozen`, re-written every time
        self.seen = 0  # committed target ids read so far
        self.detokenizer = IncrementalDetokenizer(target_tokenizer, [])

    def begin(self, prompt_ids: list[int]) -> None:
        text = self.target_tokenizer.decode(prompt_ids, skip_special_tokens=True)
        self.prefix = list(self.draft_tokenizer(text, add_special_tokens=True)["input_ids"])
        if not self.prefix:  # a prompt of special tokens only: start from the draft's own
            start = self.draft_tokenizer.bos_token_id
            self.prefix = [start if start is not None else self.draft_tokenizer.eos_token_id]
        self.frozen, self.live, self.seen = [], "", len(prompt_ids)
        self.detokenizer = IncrementalDetokenizer(self.target_tokenizer, prompt_ids)

    def ids(self, committed: list[int]) -> list[int]:
        """Draft ids for the text of `committed` (the prompt given to `begin`, then more)."""
        for token in committed[self.seen :]:
            self.live += self.detokenizer.push(token)
        self.seen = len(committed)
        live = self._encode(self.live)
        if len(live) > 2 * LIVE:
            live = self._freeze(live, len(live) - LIVE)
        return [*self.prefix, *self.frozen, *live]

    def _encode(self, text: str) -> list[int]:
        if not text:
            return []
        return list(self.draft_tokenizer(text, add_special_tokens=False)["input_ids"])

    def _freeze(self, live: list[int], count: int) -> list[int]:
        text = added_text(self.draft_tokenizer, [*self.prefix, *self.frozen], live[:count])
        if not text or text.endswith("\ufffd") or not self.live.startswith(text):
            return live  # this tokenizer does not decode a prefix to a prefix: keep it live
        self.frozen.extend(live[:count])
        self.live = self.live[len(text) :]
        return live[count:]


def target_continuation(tokenizer, committed: list[int], text: str) -> list[int]:
    """Target ids that continue `committed` with `text`: the tokenization of the text of the
    last `LOOKBEHIND` committed ids plus `text`, minus those ids; where that does not start
    with them (the text merges into the last committed token), `text` written on its own,
    cut to the longest part whose ids decode after `committed` to a prefix of `text`."""
    if not text:
        return []
    tail = committed[-LOOKBEHIND:]
    tail_text = tokenizer.decode(tail, clean_up_tokenization_spaces=False)
    joined = tokenizer(tail_text + text, add_special_tokens=False)["input_ids"]
    if list(joined[: len(tail)]) == tail:
        return list(joined[len(tail) :])
    alone = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    wanted = tail_text + text
    for end in range(len(alone), 0, -1):
        decoded = tokenizer.decode([*tail, *alone[:end]], clean_up_tokenization_spaces=False)
        if decoded.startswith(tail_text) and wanted.startswith(decoded):
            return alone[:end]
    return []


def added_text(tokenizer, context: list[int], ids: list[int]) -> str:
    """The text `ids` add after `context` (decoded after its last ids, so that a leading
    space a decoder drops at the start of a text is kept)."""
    before_ids = context[-LOOKBEHIND:]
    before = tokenizer.decode(before_ids, clean_up_tokenization_spaces=False)
    after = tokenizer.decode([*before_ids, *ids], clean_up_tokenization_spaces=False)
    if after.startswith(before):
        return after[len(before) :]
    return tokenizer.decode(ids, clean_up_tokenization_spaces=False)


def draft_text(tokenizer, context: list[int], drafted: list[int]) -> str:
    """The text `drafted` adds after `context`, less a character still partial at its end."""
    return added_text(tokenizer, context, drafted).rstrip("\ufffd")


def intersection_distribution(
    logits: torch.Tensor, shared: torch.Tensor, temperature: float, top_p: float
) -> torch.Tensor:
    """[V_draft] logits -> the draft's distribution over the `shared` ids only, renormalised,
    with temperature and top-p applied as to the target (one-hot at T = 0)."""
    return probs(logits.masked_fill(~shared, float("-inf")), temperature, top_p)


class DraftModel:
    """The draft model and its KV cache, which holds a prefix of the ids it was last given."""

    def __init__(self, model: PreTrainedModel, width: int) -> None:
        self.model = model
        self.width = width  # ids the tokenizer has: logits past it (padding) are never drawn
        self.cache = kv_cache.new_cache(model.config)
        self.fed: list[int] = []

    def reset(self) -> None:
        self.cache = kv_cache.new_cache(self.model.config)
        self.fed = []

    def logits_after(self, context: list[int]) -> torch.Tensor:
        """[width] logits after `context`: the cache is kept for the longest common prefix of
        `context` and what it holds (at least the last id is fed again), the rest is fed."""
        keep = 0
        limit = min(len(self.fed), len(context) - 1)
        while keep < limit and self.fed[keep] == context[keep]:
            keep += 1
        kv_cache.truncate(self.cache, keep)
        del self.fed[keep:]
        return self.feed(context[keep:])

    def feed(self, tokens: list[int]) -> torch.Tensor:
        input_ids = torch.tensor([tokens], device=self.model.device)
        out = self.model(
            input_ids=input_ids, **kv_cache.cache_arg(self.cache), use_cache=True, logits_to_keep=1
        )
        self.fed.extend(tokens)
        logits = out.logits[0, -1].float()  # [V_draft]
        if logits.shape[-1] > self.width:
            logits[self.width :] = float("-inf")
        return logits


class CrossTokenizerDrafter(Drafter):
    """A draft model with another tokenizer: universal assisted generation at T = 0 (or
    token-level intersection where `greedy` says so), token-level intersection at T > 0."""

    name = "classic"

    def __init__(
        self,
        draft: PreTrainedModel,
        draft_tokenizer,
        target_tokenizer,
        target_vocab: int,
        *,
        greedy: Algorithm = Algorithm.UAG,
        vocabulary: VocabularyMap | None = None,
    ) -> None:
        if greedy not in (Algorithm.UAG, Algorithm.TLI):
            raise ValueError(f"no cross-tokenizer algorithm {greedy}")
        width = int(draft.get_output_embeddings().weight.shape[0])
        self.greedy = greedy
        self.draft_tokenizer = draft_tokenizer
        self.target_tokenizer = target_tokenizer
        self.model = DraftModel(draft, min(width, len(draft_tokenizer)))
        self.context = DraftContext(target_tokenizer, draft_tokenizer)
        self.vocabulary = vocabulary or vocabulary_map(
            target_tokenizer, draft_tokenizer, target_vocab, width
        )
        if not self.vocabulary.size:
            raise SpecdecError(
                "the draft's and the target's tokenizers share no token; pick a draft whose "
                "vocabulary overlaps the target's, or use --method ngram"
            )
        self.stops = set(draft_tokenizer.all_special_ids)
        self.parts: dict[str, float] = {}

    def algorithm(self, config: DecodeConfig) -> Algorithm:
        return self.greedy if config.greedy else Algorithm.TLI

    def describe(self, config: DecodeConfig) -> dict[str, str]:
        algorithm = self.algorithm(config)
        if algorithm is Algorithm.TLI and config.greedy:
            return {"draft_algorithm": "token-level intersection (T = 0)"}
        return {"draft_algorithm": algorithm.value}

    def draft_parts(self) -> dict[str, float]:
        """The latest propose's draft forwards ("forwards") and the text written with the
        other tokenizer ("retokenize")."""
        return self.parts

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        self.context.begin(ids)
        self.model.reset()

    @torch.inference_mode()
    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        device = self.model.model.device
        start = now(device)
        context = self.context.ids(ids)
        written = now(device)
        logits = self.model.logits_after(context)
        if self.algorithm(config) is Algorithm.UAG:
            drafted = self._greedy_text(logits, config.k)
            forwards = now(device)
            text = draft_text(self.draft_tokenizer, context, drafted)
            tokens = target_continuation(self.target_tokenizer, ids, text)
            proposal = Proposal(tokens=tokens)
        else:
            proposal = self._intersection(logits, config, generator)
            forwards = now(device)
        self.parts = {"forwards": forwards - written, "retokenize": written - start}
        self.parts["retokenize"] += now(device) - forwards
        return proposal

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        """Nothing to roll back here: the next `propose` keeps the cache for the ids it shares
        with the new context."""

    def _greedy_text(self, logits: torch.Tensor, k: int) -> list[int]:
        drafted: list[int] = []
        for i in range(k):
            token = int(logits.argmax())
            if token in self.stops:
                break
            drafted.append(token)
            if i + 1 < k:
                logits = self.model.feed([token])
        return drafted

    def _intersection(
        self, logits: torch.Tensor, config: DecodeConfig, generator: torch.Generator
    ) -> Proposal:
        shared = self.vocabulary.shared.to(logits.device)
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for i in range(config.k):
            q = intersection_distribution(logits, shared, config.temperature, config.top_p)
            token = int(q.argmax()) if config.greedy else sample(q, generator)
            tokens.append(self.vocabulary.target_id(token))
            rows.append(q)
            if i + 1 < config.k:
                logits = self.model.feed([token])
        if config.greedy or not rows:
            return Proposal(tokens=tokens)
        return Proposal(tokens=tokens, q=self.vocabulary.to_target(torch.stack(rows)))

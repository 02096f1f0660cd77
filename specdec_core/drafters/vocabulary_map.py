"""The tokens two vocabularies share: draft ids whose text is exactly one target token's text.

A token's text is what it adds to a decoded string after a plain anchor token, so the space
markers of each family compare as the space they stand for (SentencePiece's '▁hello' and
byte-level BPE's 'Ġhello' are both " hello"; a WordPiece continuation '##lo' is "lo").
Special tokens and tokens that decode to part of a character (a lone UTF-8 byte, shown as
U+FFFD) have no text and are shared by nothing. Where several target ids have the same text
(a byte-fallback '<0x41>' beside 'A'), the one the target's tokenizer writes for that text
alone is taken, else the lowest.

Contract: `VocabularyMap.target_ids[d]` is the target id with draft id d's text, −1 where the
target has none; `to_target` carries a distribution over draft ids to the target's ids
(mass summed where two draft ids share a target id, zero elsewhere). Building one decodes
every token of both vocabularies once; `vocabulary_map` keeps the map of a tokenizer pair for
as long as both tokenizers live.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

_ANCHOR_TEXT = "a"  # the token every token is decoded after, so leading spaces survive


@dataclass(frozen=True)
class VocabularyMap:
    target_ids: torch.Tensor  # [V_draft] long: the target id with the same text, -1 for none
    target_vocab: int  # width of the target's distributions

    @property
    def shared(self) -> torch.Tensor:
        """[V_draft] bool: the draft ids that have a target id."""
        return self.target_ids >= 0

    @property
    def size(self) -> int:
        """How many draft ids have a target id."""
        return int(self.shared.sum())

    def target_id(self, draft_id: int) -> int:
        return int(self.target_ids[draft_id])

    def to_target(self, q: torch.Tensor) -> torch.Tensor:
        """[..., V_draft] draft distribution (zero outside `shared`) -> [..., target_vocab]."""
        shared = self.shared.to(q.device)
        ids = self.target_ids.to(q.device)[shared]  # [S]
        out = q.new_zeros((*q.shape[:-1], self.target_vocab))
        return out.index_add_(-1, ids, q[..., shared])


def token_texts(tokenizer, width: int | None = None) -> list[str | None]:
    """The text of each id below `width` (default: the tokenizer's length), None for special
    tokens, ids past the tokenizer and tokens that are part of a character."""
    size = len(tokenizer)
    width = size if width is None else width
    backend = tokenizer.backend_tokenizer
    anchor = _anchor(tokenizer)
    before = backend.decode([anchor], skip_special_tokens=False)
    ids = range(min(size, width))
    decoded = backend.decode_batch([[anchor, i] for i in ids], skip_special_tokens=False)
    special = set(tokenizer.all_special_ids) | {
        i for i, token in tokenizer.added_tokens_decoder.items() if token.special
    }
    texts: list[str | None] = [None] * width
    for i, text in zip(ids, decoded, strict=True):
        if i in special or not text.startswith(before):
            continue
        text = text[len(before) :]
        if text and "\ufffd" not in text:
            texts[i] = text
    return texts


def build_vocabulary_map(
    target_tokenizer, draft_tokenizer, target_vocab: int, draft_vocab: int
) -> VocabularyMap:
    """The map from `draft_vocab` draft ids to `target_vocab` target ids by token text."""
    by_text: dict[str, list[int]] = {}
    for target_id, text in enumerate(token_texts(target_tokenizer, target_vocab)):
        if text is not None:
            by_text.setdefault(text, []).append(target_id)
    target_ids = torch.full((draft_vocab,), -1, dtype=torch.long)
    for draft_id, text in enumerate(token_texts(draft_tokenizer, draft_vocab)):
        candidates = by_text.get(text) if text is not None else None
        if candidates:
            target_ids[draft_id] = _preferred(target_tokenizer, text, candidates)
    return VocabularyMap(target_ids=target_ids, target_vocab=target_vocab)


# target tokenizer -> draft tokenizer -> (target_vocab, draft_vocab) -> map
_MAPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def vocabulary_map(
    target_tokenizer, draft_tokenizer, target_vocab: int, draft_vocab: int
) -> VocabularyMap:
    """`build_vocabulary_map`, built once per tokenizer pair and widths."""
    per_draft = _MAPS.setdefault(target_tokenizer, weakref.WeakKeyDictionary())
    per_width = per_draft.setdefault(draft_tokenizer, {})
    key = (target_vocab, draft_vocab)
    if key not in per_width:
        per_width[key] = build_vocabulary_map(
            target_tokenizer, draft_tokenizer, target_vocab, draft_vocab
        )
    return per_width[key]


def _anchor(tokenizer) -> int:
    ids = tokenizer(_ANCHOR_TEXT, add_special_tokens=False)["input_ids"]
    return int(ids[-1]) if ids else 0


def _preferred(tokenizer, text: str, candidates: list[int]) -> int:
    """Of several target ids with the same text, the one the tokenizer writes for it."""
    if len(candidates) == 1:
        return candidates[0]
    written = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(written) == 1 and written[0] in candidates:
        return int(written[0])
    return candidates[0]

"""Suffix decoding: draft what most often followed the context's longest suffix in your history.

SuffixDecoding (Oliaro et al. 2025), over earlier runs (the history a run is given):

    history = earlier runs' token ids (prompt + output), a suffix array (suffix_array.py)
    m       = the longest suffix of the committed ids (at most MAX_MATCH tokens) that occurs
              in the history or earlier in the ids themselves, followed by a token
    rows    = what followed its occurrences (the MAX_OCCURRENCES most recent ones)
    tree    = best-first by frequency: a node is a continuation prefix, its count how many
              occurrences start with it; take the most frequent nodes (then the most recent)
              until the budget, so a child never counts more than its parent and parents come
              first. Score = log(count / occurrences), the empirical probability of the path.

`suffix` proposes the tree's most frequent path, a chain of up to k tokens verified like
n-gram lookup (deterministic, q = None); `eagle2-suffix` merges the whole tree (up to k nodes,
depth k) into EAGLE-2's (drafters/eagle2/suffix.py). Both depend only on the committed ids and
the history as it was when the run began, so the lossless verifiers keep the target's output.

**The history** (`History`, owned by whoever runs the drafters: the window's engine, a bench
entry, a sweep point) holds documents per vocabulary (a tokenizer's ids mean nothing to another),
oldest first. A run of a suffix method opens a
record at `begin` and updates it with the committed ids at every `commit`; the next run that
opens one seals the earlier records into documents, so each run drafts from every run of a
suffix method before it, whatever its method, prompt or temperature. Runs of other methods are
not recorded. **Bound:** the sealed documents hold at most `max_tokens` tokens in all
(MAX_TOKENS = 65,536 by default), the oldest documents are evicted first and a longer document
keeps its last `max_tokens`. A document is int32; each vocabulary's index holds its documents
once more and their suffix array (both int64): about 20 bytes per token, 1.3 MiB at the
default cap, plus the one open record (the running drafter's own ids). An index is rebuilt
when a run begins after its documents changed: O(n log² n) numpy sorts, tens of
milliseconds at the cap, counted in that run's prefill.

**Fair comparisons.** A run drafts from the history it is given: `runner.run` without one
gives the run an empty history of its own, so its result never depends on what ran before it
in the process; a drafter built without one (`build_drafter(..., history=None)`) gets an empty
one of its own too, and the window's engine keeps one per engine. A method that ran the same
prompt just before leaves its output in a shared history, and a suffix method run next copies
it: a speedup no user would see. So
comparisons give each run a history of its own: `specdec bench` one `History` per entry (each
entry drafts from its own runs of earlier prompts; `--suffix-history shared` keeps one for all
entries, marked in the table and JSON), a sweep or Tune point one per point, and the window's
Compare a copy (`snapshot`) of the history as the Compare began for every method, which adds
nothing to it.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
from collections import deque
from collections.abc import Hashable, Sequence

import numpy as np
import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.proposal import EMPTY, Proposal
from specdec_core.decoding.target import TargetOutput
from specdec_core.drafters.suffix_array import SuffixArray, match_ends
from specdec_core.loop.drafter import Drafter

MAX_TOKENS = 1 << 16  # sealed history tokens in all, all vocabularies together
MAX_MATCH = 32  # longest suffix of the context that is matched
MAX_OCCURRENCES = 256  # most recent occurrences a proposal counts


class Record:
    """One run's sequence (prompt + committed output) until the history seals it."""

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.ids: Sequence[int] = ()
        self.sealed = False

    def update(self, ids: Sequence[int]) -> None:
        if not self.sealed:
            self.ids = ids


class History:
    """Earlier runs' token ids per vocabulary key, at most `max_tokens` in all (oldest
    evicted first); see the module docstring for the memory bound. Thread-safe."""

    def __init__(self, max_tokens: int = MAX_TOKENS) -> None:
        self.max_tokens = max_tokens
        self._lock = threading.Lock()
        self._documents: deque[tuple[Hashable, np.ndarray]] = deque()
        self._tokens = 0
        self._open: list[Record] = []
        self._indexes: dict[Hashable, SuffixArray] = {}

    @property
    def tokens(self) -> int:
        """Tokens held in sealed documents (never above `max_tokens`)."""
        return self._tokens

    def documents(self, key: Hashable) -> list[list[int]]:
        """The sealed documents of `key`, oldest first."""
        with self._lock:
            return [doc.tolist() for k, doc in self._documents if k == key]

    def add(self, key: Hashable, ids: Sequence[int]) -> None:
        """Seal `ids` as the newest document of `key`, evicting the oldest beyond the cap."""
        with self._lock:
            self._add(key, ids)

    def open(self, key: Hashable) -> Record:
        """A record for a new run of `key`; the runs opened before it are sealed first."""
        record = Record(key)
        with self._lock:
            for earlier in self._open:
                earlier.sealed = True
                self._add(earlier.key, earlier.ids)
            self._open = [record]
        return record

    def index(self, key: Hashable) -> SuffixArray | None:
        """The suffix array over `key`'s sealed documents (None if it has none)."""
        with self._lock:
            if key not in self._indexes:
                documents = [doc for k, doc in self._documents if k == key]
                if not documents:
                    return None
                self._indexes[key] = SuffixArray.of_documents(documents)
            return self._indexes[key]

    def snapshot(self) -> History:
        """A copy to draft from and record into without touching this one: the sealed
        documents and the open record (the latest run), sealed, as the next run would see."""
        copy = History(self.max_tokens)
        with self._lock:
            for key, document in self._documents:
                copy._add(key, document)
            for record in self._open:
                copy._add(record.key, record.ids)
        return copy

    def clear(self) -> None:
        with self._lock:
            self._documents.clear()
            self._open.clear()
            self._indexes.clear()
            self._tokens = 0

    def _add(self, key: Hashable, ids: Sequence[int]) -> None:
        if self.max_tokens <= 0 or not len(ids):
            return
        document = np.asarray(ids[-self.max_tokens :], dtype=np.int32)
        self._documents.append((key, document))
        self._tokens += len(document)
        self._indexes.pop(key, None)
        while self._tokens > self.max_tokens:
            old_key, old = self._documents.popleft()
            self._tokens -= len(old)
            self._indexes.pop(old_key, None)


def continuations(index: SuffixArray | None, ids: Sequence[int], depth: int) -> np.ndarray:
    """[occurrences, depth] what followed the longest matching suffix of `ids` in the history
    (`index`) and earlier in `ids`, oldest first (-1 past a document's end)."""
    own_length, own_ends = match_ends(ids, MAX_MATCH)
    length, ends = index.longest_match(ids, MAX_MATCH) if index is not None else (0, None)
    best = max(own_length, length)
    if best == 0 or depth <= 0:
        return np.zeros((0, max(depth, 0)), dtype=np.int64)
    rows = []
    if length == best:
        rows.append(_following(index.tokens, ends, depth))
    if own_length == best:
        rows.append(_following(np.asarray(ids, dtype=np.int64), own_ends, depth))
    return np.concatenate(rows)[-MAX_OCCURRENCES:]


def _following(tokens: np.ndarray, ends: np.ndarray, depth: int) -> np.ndarray:
    """tokens[end : end + depth] per end, -1 from the first separator or the end on."""
    where = ends[:, None] + np.arange(depth)[None]  # [e, depth]
    rows = np.where(where < len(tokens), tokens[np.minimum(where, len(tokens) - 1)], -1)
    rows[np.cumsum(rows < 0, axis=1) > 0] = -1
    return rows


def candidate_tree(
    rows: np.ndarray, budget: int, chain: bool = False
) -> tuple[list[int], tuple[int, ...], tuple[float, ...]]:
    """The `budget` most frequent continuation prefixes of `rows` as a tree (tokens, parents,
    scores = log of the share of rows starting with the node's path); with `chain`, only the
    most frequent child of each node (ties: the most recent row)."""
    total = len(rows)
    tokens: list[int] = []
    parents: list[int] = []
    scores: list[float] = []
    heap: list = []
    serial = itertools.count()  # tie-break of equal (count, recency): first pushed first

    def push_children(node: int, members: np.ndarray, level: int) -> None:
        if level >= rows.shape[1]:
            return
        values = rows[members, level]
        members = members[values >= 0]
        values = values[values >= 0]
        if not len(values):
            return
        unique, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
        recency = np.full(len(unique), -1)
        np.maximum.at(recency, inverse, members)  # rows are oldest first
        order = np.lexsort((-recency, -counts))
        for j in order[:1] if chain else order:
            entry = (-int(counts[j]), -int(recency[j]), next(serial))
            heapq.heappush(heap, (*entry, node, int(unique[j]), members[inverse == j], level + 1))

    if total and budget > 0:
        push_children(-1, np.arange(total), 0)
    while heap and len(tokens) < budget:
        negative_count, _, _, parent, token, members, level = heapq.heappop(heap)
        tokens.append(token)
        parents.append(parent)
        scores.append(math.log(-negative_count / total))
        push_children(len(tokens) - 1, members, level)
    return tokens, tuple(parents), tuple(scores)


class SuffixSource:
    """One run's use of a history (None: an empty one of its own): records the run, drafts
    from the history as it began."""

    def __init__(self, key: Hashable, history: History | None = None) -> None:
        self.key = key
        self.history = history if history is not None else History()
        self.record: Record | None = None
        self.index: SuffixArray | None = None

    def begin(self, ids: Sequence[int]) -> None:
        self.record = self.history.open(self.key)
        self.record.update(ids)
        self.index = self.history.index(self.key)

    def commit(self, ids: Sequence[int]) -> None:
        if self.record is not None:
            self.record.update(ids)

    def tree(self, ids: Sequence[int], k: int, chain: bool = False) -> Proposal:
        """Up to k nodes, depth k (`chain`: the most frequent path, a chain Proposal)."""
        rows = continuations(self.index, ids, k)
        tokens, parents, scores = candidate_tree(rows, k, chain)
        if not tokens:
            return EMPTY
        if chain:
            return Proposal(tokens=tokens)
        return Proposal(tokens=tokens, parents=parents, scores=scores)


class SuffixDrafter(Drafter):
    """`suffix`: the most frequent continuation in the history, a chain of up to k tokens."""

    name = "suffix"

    def __init__(self, key: Hashable, history: History | None = None) -> None:
        self.source = SuffixSource(key, history)

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        self.source.begin(ids)

    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        return self.source.tree(ids, config.k, chain=True)

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        self.source.commit(ids)

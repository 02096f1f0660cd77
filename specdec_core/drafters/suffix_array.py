"""A suffix array over token ids: every occurrence of the longest matching suffix of a context.

    index = SuffixArray(tokens)              # tokens: int array; negative values are separators
    length, ends = index.longest_match(context, max_length)

`longest_match` finds the largest m <= max_length such that context[-m:] occurs in `tokens`
followed by a token (not by a separator or the end), and returns m with `ends`, the index just
after each such occurrence (sorted, i.e. oldest first when documents are appended in order).

Building is prefix doubling (Manber & Myers 1993) with numpy sorts: O(n log² n) time in the
worst case, O(log L) sort passes where L is the longest repeated substring; memory is the
tokens plus two int64 arrays of n. A query is a binary search over the match length, each
probe a binary search over the suffixes: O(log max_length · log n · max_length) comparisons,
independent of how often the pattern occurs. Separators must be distinct negative values so
that no suffix comparison runs across two documents (`SuffixArray.of_documents` does this).

`match_ends` is the same question answered by a linear scan, for a sequence that changes every
step (the current run's own tokens) and is not worth indexing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def suffix_array(tokens: np.ndarray) -> np.ndarray:
    """Start positions of the suffixes of `tokens` in lexicographic order (shorter first on a
    tie: the end sorts before every value)."""
    n = len(tokens)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    rank = np.unique(tokens, return_inverse=True)[1].astype(np.int64).reshape(-1)
    step = 1
    while True:
        second = np.full(n, -1, dtype=np.int64)  # rank of the suffix `step` further on
        second[: max(n - step, 0)] = rank[step:]
        order = np.lexsort((second, rank))
        first_sorted, second_sorted = rank[order], second[order]
        new_group = np.ones(n, dtype=bool)
        new_group[1:] = (first_sorted[1:] != first_sorted[:-1]) | (
            second_sorted[1:] != second_sorted[:-1]
        )
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.cumsum(new_group) - 1
        if rank[order[-1]] == n - 1 or step >= n:  # all suffixes told apart
            return order
        step *= 2


class SuffixArray:
    """An immutable index over `tokens` (separators: distinct negative values)."""

    def __init__(self, tokens: np.ndarray) -> None:
        self.tokens = np.asarray(tokens, dtype=np.int64)
        self.order = suffix_array(self.tokens)

    @classmethod
    def of_documents(cls, documents: Sequence[Sequence[int]]) -> SuffixArray:
        """One index over several documents, document i followed by the separator -(i + 1)."""
        parts = []
        for i, document in enumerate(documents):
            parts.extend([np.asarray(document, dtype=np.int64), np.array([-(i + 1)])])
        return cls(np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.tokens)

    def occurrences(self, pattern: list[int]) -> np.ndarray:
        """Start positions of every occurrence of `pattern` (unsorted)."""
        lo = self._bound(pattern, upper=False)
        hi = self._bound(pattern, upper=True)
        return self.order[lo:hi]

    def longest_match(self, context: Sequence[int], max_length: int) -> tuple[int, np.ndarray]:
        """(m, ends): the longest suffix of `context` (at most `max_length`) that occurs
        followed by a token, and the index after each of its occurrences, sorted."""
        context = list(context[-max_length:]) if max_length > 0 else []
        lo, hi = 0, len(context)  # context[-lo:] occurs (trivially for lo = 0)
        while lo < hi:  # occurrence is monotone in m: a longer match implies the shorter
            mid = (lo + hi + 1) // 2
            if len(self.occurrences(context[-mid:])):
                lo = mid
            else:
                hi = mid - 1
        for m in range(lo, 0, -1):  # drop occurrences at a document's end
            ends = self.occurrences(context[-m:]) + m
            ends = ends[ends < len(self.tokens)]
            ends = np.sort(ends[self.tokens[ends] >= 0])
            if len(ends):
                return m, ends
        return 0, np.zeros(0, dtype=np.int64)

    def _bound(self, pattern: list[int], upper: bool) -> int:
        """First suffix whose first len(pattern) values are >= pattern (> with `upper`)."""
        tokens, order, m = self.tokens, self.order, len(pattern)
        lo, hi = 0, len(order)
        while lo < hi:
            mid = (lo + hi) // 2
            start = int(order[mid])
            head = tokens[start : start + m].tolist()
            if head < pattern or (upper and head == pattern):
                lo = mid + 1
            else:
                hi = mid
        return lo


def match_ends(tokens: Sequence[int], max_length: int) -> tuple[int, np.ndarray]:
    """(m, ends) as `SuffixArray.longest_match`, for the suffix of `tokens` itself: the longest
    m whose earlier occurrence in `tokens` is followed by a token (never the suffix itself)."""
    values = np.asarray(tokens, dtype=np.int64)
    n = len(values)
    if n < 2 or max_length <= 0:
        return 0, np.zeros(0, dtype=np.int64)
    ends = np.flatnonzero(values[: n - 1] == values[-1]) + 1
    if not len(ends):
        return 0, ends
    m = 1
    while m < min(max_length, n - 1):
        starts = ends - m - 1
        keep = starts >= 0
        keep[keep] = values[starts[keep]] == values[n - m - 1]
        if not keep.any():
            break
        ends, m = ends[keep], m + 1
    return m, ends

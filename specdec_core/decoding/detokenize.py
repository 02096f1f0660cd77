"""Incremental detokenization: text per token, correct across multi-byte characters.

Byte-level BPE splits one character over several tokens; decoding tokens one by one yields
replacement characters. We decode a short window and emit only text that is complete (the
prefix-offset scheme used by text-generation servers). Special tokens (end of turn, end of
text) yield no text: the reply a user reads is the same as the run's decoded text.
"""

from __future__ import annotations


class IncrementalDetokenizer:
    def __init__(self, tokenizer, prompt_ids: list[int]) -> None:
        self.tokenizer = tokenizer
        self.ids = list(prompt_ids[-6:])  # a little context so leading spaces decode right
        self.prefix = 0
        self.read = len(self.ids)

    def push(self, token_id: int) -> str:
        """Add one token; return the new text it completes ('' while a character is partial)."""
        self.ids.append(token_id)
        before = self.tokenizer.decode(self.ids[self.prefix : self.read], skip_special_tokens=True)
        after = self.tokenizer.decode(self.ids[self.prefix :], skip_special_tokens=True)
        if after.endswith("\ufffd") or len(after) <= len(before):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        return after[len(before) :]

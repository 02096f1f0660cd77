"""The token a chat template closes an assistant's turn with.

A model's generation config names the ids that end an answer, but not always the one its chat
template ends a turn with: Gemma 3 converted from a GGUF names only `<eos>`, while its template
closes each turn with `<end_of_turn>`, so an answer would run on into a made-up next turn. The
template itself says which token it is: render a conversation whose assistant message is a
marker, and the first token after the marker is the end of the turn when it is a special token
(`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, `</s>`); a template that closes a turn with plain
text (a newline) names none.
"""

from __future__ import annotations

MARKER = "END-OF-TURN-MARKER"


def end_of_turn_id(tokenizer) -> int | None:
    """The special token id the tokenizer's chat template closes an assistant's turn with, or
    None (no template, a template that closes it with plain text or refuses the probe)."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": MARKER}]
    try:
        rendered = tokenizer.apply_chat_template(messages, tokenize=False)
    except Exception:  # a template that raises on this probe (jinja's own errors): none named
        return None
    if not isinstance(rendered, str) or MARKER not in rendered:
        return None
    after = rendered[rendered.rindex(MARKER) + len(MARKER) :].lstrip(" ")
    ids = tokenizer(after, add_special_tokens=False)["input_ids"] if after else []
    special = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}))
    return ids[0] if ids and ids[0] in special else None

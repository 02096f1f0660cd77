"""Prompts: chat-template rendering and JSONL prompt files (`prompt` or `turns` per line)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from specdec_core.errors import SpecdecError


def check_prompt_text(text: str) -> None:
    """Refuse an empty or whitespace-only prompt (before any model loads)."""
    if not text.strip():
        raise SpecdecError("the prompt is empty; type a prompt or pass --prompt TEXT")


def encode_prompt(tokenizer, text: str, raw: bool = False) -> list[int]:
    """Token ids for `text`; with the chat template as a user turn unless `raw`."""
    check_prompt_text(text)
    if raw or not has_chat_template(tokenizer):
        return list(tokenizer(text, add_special_tokens=True)["input_ids"])
    return encode_chat(tokenizer, [{"role": "user", "content": text}])


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def encode_chat(
    tokenizer, messages: list[dict[str, str]], add_generation_prompt: bool = True
) -> list[int]:
    """Token ids for a conversation (`role` user / assistant, `content`): the chat template
    rendered over the whole history (ready for the assistant's next turn where
    `add_generation_prompt`), then tokenised without adding special tokens, as
    `apply_chat_template(tokenize=True)` does. The one rendering of every chat in the engine:
    prompts, chat turns and training conversations alike. A tokenizer without a template
    gets the contents joined by newlines, with its own special tokens."""
    if not has_chat_template(tokenizer):
        text = "\n".join(m["content"] for m in messages)
        return list(tokenizer(text, add_special_tokens=True)["input_ids"])
    rendered = tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=False
    )
    return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])


def encode_chat_turn(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """`encode_chat` for the next turn of a chat: the conversation must end with the user's
    message, and the model must have a chat template."""
    if not messages or messages[-1]["role"] != "user" or not messages[-1]["content"].strip():
        raise SpecdecError("the message is empty; type a message to send")
    if not has_chat_template(tokenizer):
        raise SpecdecError("this model has no chat template; turn chat mode off (raw prompts)")
    from jinja2 import TemplateError

    try:
        return encode_chat(tokenizer, messages)
    except TemplateError as error:  # e.g. a template that takes no system message
        raise SpecdecError(
            f"the model's chat template refused this conversation ({error}); clear the system "
            "prompt if the model takes none"
        ) from error


def read_conversations(path: str | Path, limit: int | None = None) -> list[list[str]]:
    """Every user turn of each line of a prompt file (`turns`, or a `prompt` as one turn):
    what a multi-turn replay sends, one turn after another."""
    conversations = []
    for number, record in _records(Path(path)):
        turns = record.get("turns", [record.get("prompt")])
        if not isinstance(turns, list) or not all(isinstance(t, str) and t.strip() for t in turns):
            raise SpecdecError(f"{path}:{number}: 'turns' must be a list of non-empty strings")
        conversations.append(list(turns))
        if limit is not None and len(conversations) >= limit:
            break
    if not conversations:
        raise SpecdecError(f"{path} holds no prompts; one JSON object per line")
    return conversations


def read_prompt_file(path: str | Path, limit: int | None = None) -> list[str]:
    """Prompts from a JSONL file: each line has `prompt` (string) or `turns` (first is used)."""
    prompts: list[str] = []
    for number, record in _records(Path(path)):
        try:
            prompt = record["prompt"] if "prompt" in record else record["turns"][0]
        except (KeyError, IndexError, TypeError):
            raise SpecdecError(
                f"{path}:{number}: expected a JSON object with 'prompt' or 'turns'"
            ) from None
        if not isinstance(prompt, str) or not prompt.strip():
            raise SpecdecError(f"{path}:{number}: the prompt is empty or not a string")
        prompts.append(prompt)
        if limit is not None and len(prompts) >= limit:
            break
    if not prompts:
        raise SpecdecError(f"{path} holds no prompts; one JSON object per line")
    return prompts


def _records(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, JSON object) for each non-empty line; bad lines say where they are."""
    if not path.is_file():
        raise SpecdecError(f"prompt file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        line = path.read_bytes()[: error.start].count(b"\n") + 1
        raise SpecdecError(f"{path}:{line}: not UTF-8 text; save the file as UTF-8") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise SpecdecError(
                f"{path}:{number}: expected a JSON object with 'prompt' or 'turns'"
            ) from None
        if not isinstance(record, dict):
            raise SpecdecError(f"{path}:{number}: expected a JSON object with 'prompt' or 'turns'")
        yield number, record

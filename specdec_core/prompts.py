"""Prompts: chat-template rendering and JSONL prompt files (`prompt` or `turns` per line)."""

from __future__ import annotations

import json
from pathlib import Path

from specdec_core.errors import SpecdecError


def check_prompt_text(text: str) -> None:
    """Refuse an empty or whitespace-only prompt (before any model loads)."""
    if not text.strip():
        raise SpecdecError("the prompt is empty; type a prompt or pass --prompt TEXT")


def encode_prompt(tokenizer, text: str, raw: bool = False) -> list[int]:
    """Token ids for `text`; with the chat template as a user turn unless `raw`."""
    check_prompt_text(text)
    if raw or not getattr(tokenizer, "chat_template", None):
        return list(tokenizer(text, add_special_tokens=True)["input_ids"])
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
    )
    return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])


def read_prompt_file(path: str | Path, limit: int | None = None) -> list[str]:
    """Prompts from a JSONL file: each line has `prompt` (string) or `turns` (first is used)."""
    path = Path(path)
    if not path.is_file():
        raise SpecdecError(f"prompt file not found: {path}")
    prompts: list[str] = []
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
            prompt = record["prompt"] if "prompt" in record else record["turns"][0]
        except (json.JSONDecodeError, KeyError, IndexError, TypeError):
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

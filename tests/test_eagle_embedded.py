"""The bundled EAGLE head and token-level draft on the embedded model (short generations)."""

import pytest

from specdec_core.decoding.config import DecodeConfig
from specdec_core.run.prompts import encode_prompt
from specdec_core.run.runner import load_draft, load_head, run

pytestmark = pytest.mark.slow

PROMPT = "Give three tips for staying healthy."


@pytest.fixture(scope="module")
def prompt_ids(embedded):
    return encode_prompt(embedded.tokenizer, PROMPT, raw=False)


def test_bundled_head_decodes_exactly_like_the_target_and_accepts_drafts(embedded, prompt_ids):
    config = DecodeConfig(max_new_tokens=32, k=4)
    reference = run(embedded, "ar", prompt_ids, config)
    head = load_head("embedded", embedded)
    eagle = run(embedded, "eagle", prompt_ids, config, head)
    assert eagle.token_ids == reference.token_ids
    assert eagle.mean_accept_length > 1.15  # measured 1.28 here (k = 4, 32 tokens)


def test_bundled_draft_decodes_exactly_like_the_target(embedded, prompt_ids):
    config = DecodeConfig(max_new_tokens=24, k=3)
    reference = run(embedded, "ar", prompt_ids, config)
    draft = load_draft("embedded", embedded)
    assert run(embedded, "classic", prompt_ids, config, draft).token_ids == reference.token_ids

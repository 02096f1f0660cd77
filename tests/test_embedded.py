"""Integration on the embedded SmolLM2-135M-Instruct (converted once into the user cache)."""

import pytest

from specdec_core.decoding.config import DecodeConfig
from specdec_core.models.loading import cache_root, load_model
from specdec_core.run.prompts import encode_prompt
from specdec_core.run.runner import run

pytestmark = pytest.mark.slow


def test_embedded_loads_from_the_converted_cache(embedded):
    again = load_model("embedded", device="cpu")
    assert again.source.startswith(str(cache_root()))
    assert again.model.config.num_hidden_layers == 30 and again.vocab_size == 49152


def test_embedded_answers_coherently_and_classic_matches_ar(embedded):
    ids = encode_prompt(embedded.tokenizer, "What is the capital of France?")
    config = DecodeConfig(max_new_tokens=24, k=4)
    ar = run(embedded, "ar", ids, config)
    assert "Paris" in ar.text
    classic = run(embedded, "classic", ids, config, embedded)  # the target as its own draft
    assert classic.token_ids == ar.token_ids
    assert classic.mean_accept_length > 3.0  # a draft identical to the target is always right


def test_a_conversion_published_by_another_process_is_kept_and_ours_dropped(tmp_path):
    from specdec_core.models.loading import publish_conversion

    def converted(name: str, text: str):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(text)
        return folder

    target = tmp_path / "entry"
    assert publish_conversion(converted("ours-1", "first"), target) == target
    assert (target / "config.json").read_text() == "first"
    publish_conversion(converted("ours-2", "second"), target)  # another process was first
    assert (target / "config.json").read_text() == "first" and not (tmp_path / "ours-2").exists()
    (target / "config.json").unlink()  # a broken entry is replaced
    publish_conversion(converted("ours-3", "third"), target)
    assert (target / "config.json").read_text() == "third"

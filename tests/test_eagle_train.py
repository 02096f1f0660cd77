"""`specdec train` on a tiny random target: a few steps produce loadable models."""

import json

import pytest
import torch

from specdec_core.cli import main
from specdec_core.config import DecodeConfig
from specdec_core.eagle.formats import load_head
from specdec_core.models import load_model
from specdec_core.runner import load_draft, run
from tests.tiny import VOCAB, tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    tiny_model(1).save_pretrained(root / "target")
    tiny_tokenizer().save_pretrained(root / "target")
    generator = torch.Generator().manual_seed(0)
    lines = []
    for _ in range(40):
        words = torch.randint(3, VOCAB, (30,), generator=generator).tolist()
        lines.append(json.dumps({"text": " ".join(f"w{w - 3}" for w in words)}))
    (root / "data.jsonl").write_text("\n".join(lines))
    return root


@pytest.mark.parametrize("kind", ["eagle", "draft"])
def test_a_short_training_run_produces_a_loadable_model(tiny_dir, tmp_path, kind):
    out = tmp_path / kind
    argv = [
        "train",
        kind,
        "--target",
        str(tiny_dir / "target"),
        "--data",
        str(tiny_dir / "data.jsonl"),
        "--tokens",
        "800",
        "--epochs",
        "2",
        "--out",
        str(out),
        "--draft-vocab",
        "16",
        "--batch-tokens",
        "256",
        "--feature-dtype",
        "float32",
    ]
    assert main(argv) == 0
    card = json.loads((out / "specdec_card.json").read_text())
    assert card["epochs"] == 2 and card["tokens"] >= 800 and card["draft_vocab"] == 16
    target = load_model(str(tiny_dir / "target"), device="cpu", dtype="float32")
    config = DecodeConfig(max_new_tokens=20, k=3)
    ids = [1, 5, 9, 4]
    reference = run(target, "ar", ids, config)
    if kind == "eagle":
        extra = load_head(str(out), target)
        assert extra.draft_vocab == 16
        method = "eagle"
    else:
        extra = load_draft(str(out), target)  # the partial-draft path
        method = "classic"
    assert run(target, method, ids, config, extra).token_ids == reference.token_ids
    assert main(argv) == 0  # a rerun resumes from the finished checkpoint

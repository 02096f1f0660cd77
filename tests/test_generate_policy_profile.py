"""`specdec generate --policy-profile FILE` picks the prompt's kind, runs with the policy the
profile gives that kind, and says which."""

from __future__ import annotations

import json

import pytest

from specdec_core.cli import main
from specdec_core.run.policy_profile import KindSetting, PolicyProfile, prompt_feature
from tests.tiny import tiny_model, tiny_tokenizer

LOOP = "w7 w8 w7 w8 w7 w8"
WORDS = "w3 w14 w20 w5"


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("generate-profile")
    tiny_model(1).save_pretrained(root / "target")  # the session's tiny_target, on disk
    tiny_tokenizer().save_pretrained(root / "target")
    return root / "target"


@pytest.fixture(name="profile_file")
def profile_file_fixture(tmp_path, tiny_target):
    """A profile for the tiny target: loops run threshold tau=0.01, words the lossless rule."""
    loop = KindSetting("loop", 0.01, 0.0, 0.0, 1, prompt_feature(tiny_target, LOOP))
    words = KindSetting("words", None, 0.0, 0.0, 1, prompt_feature(tiny_target, WORDS))
    profile = PolicyProfile("threshold", "tau", 0.05, (loop, words), method="ngram")
    return profile.save(tmp_path / "profile.json")


def generate(target_dir, profile_file, prompt, *more):
    return main([
        "generate", "--method", "ngram", "--prompt", prompt, "--target", str(target_dir),
        "--raw", "--k", "3", "--max-new-tokens", "8", "--policy-profile", str(profile_file),
        *more,
    ])  # fmt: skip


def test_generate_runs_the_policy_of_the_prompts_kind_and_says_so(target_dir, profile_file, capsys):
    assert generate(target_dir, profile_file, LOOP) == 0
    err = capsys.readouterr().err
    assert "[policy profile] kind loop: threshold tau=0.01" in err
    assert "(LOSSY policy)" in err  # the run used it

    assert generate(target_dir, profile_file, WORDS, "--json") == 0
    captured = capsys.readouterr()
    record = json.loads(captured.out)
    assert "kind words: lossless" in captured.err
    assert record["policy_kind"] == "words" and record["policy"] == "lossless"
    assert record["lossy"] is False


def test_generate_refuses_a_policy_beside_a_profile(target_dir, profile_file, capsys):
    code = generate(target_dir, profile_file, LOOP, "--policy", "threshold")
    assert code == 2 and "drop --policy" in capsys.readouterr().err

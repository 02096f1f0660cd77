"""Every file a resume reads is written whole or not at all: a save cut off midway leaves the
file before it, and a training run killed while saving its checkpoint resumes from the last
whole one and ends with the weights of a run that was never cut off."""

import json

import pytest
import torch

from specdec_core.cli import main
from specdec_core.files import save_atomic, save_tensors_atomic, write_atomic
from tests.tiny import training_dir


def _cut_off_torch_save(monkeypatch, after_saves: int):
    """torch.save that, from the `after_saves`-th call on, writes half its bytes and raises."""
    real, calls = torch.save, []

    def cut(obj, handle, *args, **kwargs):
        calls.append(1)
        if len(calls) < after_saves:
            return real(obj, handle, *args, **kwargs)
        handle.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", cut)
    return calls


def test_a_save_cut_off_midway_leaves_the_file_before_it(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    save_atomic(path, {"step": 1})
    _cut_off_torch_save(monkeypatch, after_saves=1)
    with pytest.raises(KeyboardInterrupt):
        save_atomic(path, {"step": 2})
    assert torch.load(path, weights_only=True) == {"step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no scratch file left


def test_text_and_tensor_files_are_replaced_whole(tmp_path):
    write_atomic(tmp_path / "card.json", json.dumps({"a": 1}))
    save_tensors_atomic(tmp_path / "model.safetensors", {"w": torch.ones(2, 3)})
    from safetensors.torch import load_file

    assert json.loads((tmp_path / "card.json").read_text()) == {"a": 1}
    assert torch.equal(load_file(tmp_path / "model.safetensors")["w"], torch.ones(2, 3))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    prompts = (json.dumps({"prompt": "w1 w2 w3"}), json.dumps({"turns": ["w4 w5", "w6"]}))
    return training_dir(tmp_path_factory.mktemp("train"), prompts=prompts)


@pytest.mark.slow
def test_a_run_killed_while_saving_its_checkpoint_resumes_from_the_last_whole_one(
    tiny_dir, tmp_path, monkeypatch, capsys
):
    from safetensors.torch import load_file

    common = [
        "train", "eagle",
        *("--target", str(tiny_dir / "target"), "--data", str(tiny_dir / "data.jsonl")),
        *("--tokens", "800", "--epochs", "2", "--draft-vocab", "16"),
        *("--batch-tokens", "256", "--feature-dtype", "float32", "--save-every", "1"),
        *("--val-kinds", "0"),  # the table by kind is tests/test_validate_head.py's
    ]  # fmt: skip
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert main([*common, "--out", str(whole)]) == 0
    real = torch.save
    # feature shards are saved first; count the checkpoint saves only
    saves = []

    def cut_third_checkpoint(obj, handle, *args, **kwargs):
        if isinstance(obj, dict) and "optimizer" in obj:
            saves.append(obj["state"]["step"])
            if len(saves) == 3:
                handle.write(b"PK\x03\x04 half a checkpoint")
                raise KeyboardInterrupt
        return real(obj, handle, *args, **kwargs)

    monkeypatch.setattr(torch, "save", cut_third_checkpoint)
    assert main([*common, "--out", str(cut)]) == 130
    capsys.readouterr()
    kept = torch.load(cut / "checkpoint.pt", weights_only=True)["state"]["step"]
    assert kept == saves[1]  # the last whole checkpoint, not the one cut off
    monkeypatch.setattr(torch, "save", real)
    assert main([*common, "--out", str(cut)]) == 0
    a, b = load_file(whole / "model.safetensors"), load_file(cut / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

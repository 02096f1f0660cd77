"""`TrainRequest`: settings that cannot work are refused when the request is made, with one line
that says what to do, before any model loads."""

import pytest

from specdec_core.cli import main
from specdec_core.errors import SpecdecError
from specdec_core.models import loading as models
from specdec_core.training.request import TrainRequest

REFUSED = [
    ({"trains": "draft", "init": "embedded"}, "drop it for `specdec train draft`"),
    ({"trains": "draft", "arch": "eagle3"}, "drop it for `specdec train draft`"),
    ({"trains": "draft", "layers": 2}, "drop it for `specdec train draft`"),
    ({"layers": 0}, "at least one decoder layer"),
    ({"arch": "eagle3", "layers": 2}, "drop --layers"),
    ({"arch": "eagle3", "draft_vocab": 0}, "--draft-vocab N"),
    ({"data": ("self", "sharegpt"), "tokens": (1, 2, 3)}, "one per --data source"),
    ({"data": ("self", "wikipedia")}, "unknown --data 'wikipedia'"),
    ({"data": ()}, "names no source"),
    ({"data": ("missing.jsonl",)}, "missing.jsonl: no such file"),
]


@pytest.mark.parametrize(("settings", "message"), REFUSED)
def test_settings_that_cannot_work_are_refused_in_one_line(settings, message):
    with pytest.raises(SpecdecError, match=message) as refused:
        TrainRequest(**{"trains": "eagle", "out": "out", **settings})
    assert "\n" not in str(refused.value)


def test_one_budget_covers_every_source_and_settings_that_fit_are_kept():
    request = TrainRequest("eagle", out="out", data=("self", "sharegpt"), tokens=(500,))
    assert request.budgets == (500, 500)
    assert str(request.work_dir) == "out/work" and str(request.checkpoint_dir) == "out"
    continued = TrainRequest("eagle", out="out", init="head", arch="eagle3", draft_vocab=0)
    assert continued.draft_vocab == 0  # the --init head brings its draft vocabulary


def test_token_budgets_take_the_same_counts_as_specdec_data():
    import argparse

    from specdec_core.cli.train import register, request_from_args

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    argv = ["train", "eagle", "--data", "self,magpie", "--tokens", "2M,500k", "--out", "o"]
    assert request_from_args(parser.parse_args(argv)).budgets == (2_000_000, 500_000)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["draft", "--init", "embedded"], "--init continues an EAGLE head"),
        (["eagle", "--layers", "0"], "at least one decoder layer"),
        (["eagle", "--data", "self,sharegpt", "--tokens", "1,2,3"], "one per --data source"),
        (["eagle", "--tokens", "lots"], "--tokens lots: use a count such as 4M, 500k"),
    ],
)
def test_specdec_train_refuses_before_loading_the_target(
    argv, message, tmp_path, monkeypatch, capsys
):
    def load_model(*args, **kwargs):
        raise AssertionError("the target was loaded before the settings were checked")

    monkeypatch.setattr(models, "load_model", load_model)
    out = tmp_path / "out"
    assert main(["train", *argv, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("request_type", ["eagle", "medusa", "mlp-speculator"])
def test_bfloat16_features_load_in_float32_on_a_cpu_that_emulates_bfloat16(
    request_type, monkeypatch
):
    from specdec_core.models import prepacked_linear
    from specdec_core.training.medusa import MedusaTrainRequest
    from specdec_core.training.mlp_speculator import SpeculatorRequest

    def made(**settings):
        if request_type == "medusa":
            return MedusaTrainRequest(out="out", **settings)
        if request_type == "mlp-speculator":
            return SpeculatorRequest(out="out", **settings)
        return TrainRequest(trains="eagle", out="out", **settings)

    monkeypatch.setattr(prepacked_linear, "native_bf16", lambda: False)
    assert made(feature_dtype="bfloat16").target_dtype() == "float32"
    assert made(feature_dtype="float16").target_dtype() == "float16"
    assert made(feature_dtype="bfloat16", device="cuda").target_dtype() == "bfloat16"
    monkeypatch.setattr(prepacked_linear, "native_bf16", lambda: True)
    assert made(feature_dtype="bfloat16").target_dtype() == "bfloat16"

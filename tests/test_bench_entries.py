"""Bench entries naming their own head: `eagle@A,eagle@B` in one run against the same `ar`."""

from __future__ import annotations

import pytest
import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.formats import save_head
from specdec_core.measurement.bench import load_extras, run_bench
from specdec_core.measurement.bench_entries import entry_method, parse_entry
from specdec_core.run import runner
from tests.eagle_tiny import tiny_head


@pytest.fixture
def two_heads(tiny_target, tmp_path):
    """Two different random heads for the tiny target, saved as head directories."""
    return tuple(
        str(
            save_head(
                tiny_head(tiny_target, seed=seed), tmp_path / f"head{seed}", dtype=torch.float32
            )
        )
        for seed in (3, 8)
    )


def test_an_entry_names_its_head_and_its_policy():
    base = DecodeConfig(k=3)
    entry = parse_entry("eagle@heads/v2:threshold:tau=0.3", base)
    assert (entry.method, entry.spec, entry.config.policy) == ("eagle", "heads/v2", "threshold")
    assert entry.config.policy_params == {"tau": 0.3} and entry.config.k == 3
    assert parse_entry("eagle2@org/head", base).spec == "org/head"
    assert parse_entry("eagle", base) == parse_entry("eagle", base)
    assert parse_entry("eagle", base).spec is None and parse_entry("eagle", base).config is base
    assert entry_method("eagle2@a/b:typical") == "eagle2"
    for bad in ("ngram@embedded", "eagle@", "suffix@x:threshold"):
        with pytest.raises(SpecdecError, match="bench entry"):
            parse_entry(bad, base)


def test_each_head_spec_loads_once_and_is_shared_by_its_entries(tiny_target, two_heads):
    a, b = two_heads
    entries = [parse_entry(label, DecodeConfig()) for label in
               ("ar", f"eagle@{a}", f"eagle2@{a}", f"eagle@{b}", "ngram")]  # fmt: skip
    extras = load_extras(entries, tiny_target, {"head": a})
    assert extras[f"eagle@{a}"] is extras[f"eagle2@{a}"]
    assert extras[f"eagle@{b}"] is not extras[f"eagle@{a}"]
    assert extras["ar"] is None and extras["ngram"] is None


def test_what_a_method_loads_is_named_by_its_kind_and_spec_and_said_as_it_loads(monkeypatch):
    assert runner.extra_key("ar") is None and runner.extra_key("hf-generate") is None
    assert runner.extra_key("eagle2") == ("head", "embedded")
    assert runner.extra_key("eagle", {"head": "heads/v2", "draft": "d"}) == ("head", "heads/v2")
    assert runner.extra_key("hf-assisted", {"draft": "d"}) == ("draft", "d")  # the classic draft
    assert parse_entry("eagle@a", DecodeConfig()).specs({"head": "b"}) == {"head": "a"}
    loads, said = [], []

    def loader(spec, target, progress=None):
        loads.append(spec)
        return "a head"

    def progress(message: str, share: float) -> None:
        said.append((message, share))

    monkeypatch.setitem(runner.EXTRA_LOADERS, "head", loader)
    assert runner.load_extra("eagle", None, {"head": "heads/v2"}, progress) == "a head"
    assert runner.load_extra("ngram", None, {"head": "heads/v2"}, progress) is None
    assert loads == ["heads/v2"]
    assert said == [("loading head 'heads/v2'", 0.0), ("loaded head 'heads/v2'", 1.0)]


def test_a_bench_compares_two_heads_against_the_same_ar(tiny_target, two_heads):
    a, b = two_heads
    config = DecodeConfig(max_new_tokens=24, k=3)
    methods = [f"eagle@{a}", f"eagle@{b}", f"eagle2@{b}:lossless"]
    prompts = ["w3 w4 w5 w6", "w10 w11 w3 w9 w20"]
    result = run_bench(tiny_target, methods, prompts, config, specs={})
    assert list(result.methods) == ["ar", *methods]  # keyed by the entry as written
    for label in methods:
        assert result.methods[label].identical_to_ar == 1.0
        assert result.methods[label].speedup_vs_ar is not None
    tau_a = result.methods[f"eagle@{a}"].mean_accept_length
    tau_b = result.methods[f"eagle@{b}"].mean_accept_length
    assert tau_a != tau_b  # different heads draft differently
    assert {row.method for row in result.rows} == {"ar", *methods}


def test_cli_refuses_a_model_spec_on_a_method_without_one_before_loading(capsys, tmp_path):
    from specdec_core.cli import main

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hi"}\n')
    assert main(["bench", "--methods", "ar,ngram@embedded", "--prompts", str(prompts)]) == 2
    assert "'ngram' needs no model" in capsys.readouterr().err

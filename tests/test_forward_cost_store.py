"""Forward costs kept between runs: a second load on the same machine checks two sizes instead
of timing all of them, and measures again when the kept table no longer fits."""

import json

import pytest
import torch
from transformers import LlamaForCausalLM

from specdec_core.decoding.cost_store import CostStore, scaled
from specdec_core.decoding.forward_costs import TARGET_SIZES, ForwardCosts
from tests.tiny import tiny_model


def saved_tiny(folder):
    """A tiny target read from `folder` (a model read from somewhere: one a later run meets)."""
    tiny_model(1).save_pretrained(folder)
    return LlamaForCausalLM.from_pretrained(folder).eval()


@pytest.fixture
def counted(tmp_path):
    """A tiny target read from a folder, whose forwards (of its decoder stack) are counted."""
    model = saved_tiny(tmp_path / "target")
    calls = {"n": 0}
    model.model.register_forward_hook(lambda *_: calls.__setitem__("n", calls["n"] + 1))
    return model, calls


def _forwards(model, calls, store) -> tuple[dict, int, ForwardCosts]:
    before = calls["n"]
    costs = ForwardCosts(store=store)
    table = costs.target(model)
    return table, calls["n"] - before, costs


def test_a_second_load_checks_two_sizes_and_keeps_the_table(counted, tmp_path):
    model, calls = counted
    store = CostStore(tmp_path / "forward-costs.json")
    first, measured, costs = _forwards(model, calls, store)
    assert not costs.target_reused(model)
    assert sorted(first) == list(TARGET_SIZES)
    # a prefill, a warm-up and five timed rounds of every size
    assert measured == 1 + 6 * len(TARGET_SIZES)

    again, checked, costs = _forwards(model, calls, store)
    sizing = costs.for_sizing(model, ("head",), lambda k: None)
    if costs.target_reused(model):  # the machine's speed held: two sizes timed, three rounds
        assert checked == 1 + 4 * 2 and again == first
        assert "kept from an earlier run, checked at load" in sizing.text()
        assert sizing.describe()["target_kept"] is True
    else:  # it did not (another process's load): measured afresh and kept
        assert checked == measured + 1 + 4 * 2
        assert "timed at load" in sizing.text()


def test_a_kept_table_that_no_longer_fits_is_measured_again(counted, tmp_path):
    model, calls = counted
    path = tmp_path / "forward-costs.json"
    store = CostStore(path)
    _, measured, _ = _forwards(model, calls, store)
    saved = json.loads(path.read_text())
    (key,) = saved
    # as if its largest size had been timed 50x slower: a shape the machine no longer has
    largest = max(saved[key]["target"], key=int)
    slow = {n: (50 if n == largest else 1) * s for n, s in saved[key]["target"].items()}
    saved[key]["target"] = slow
    path.write_text(json.dumps(saved))

    table, forwards, costs = _forwards(model, calls, store)
    assert not costs.target_reused(model)
    assert forwards == 1 + 4 * 2 + measured  # checked, then measured afresh
    kept = json.loads(path.read_text())[key]["target"]
    assert kept[largest] < slow[largest] / 5  # the new measurement replaced it
    assert sorted(int(n) for n in kept) == sorted(table)


def test_each_dtype_and_machine_setting_has_its_own_table(tmp_path):
    store = CostStore(tmp_path / "forward-costs.json")
    model = saved_tiny(tmp_path / "target")
    ForwardCosts(store=store).target(model)
    ForwardCosts(store=store).target(model.to(torch.bfloat16))
    saved = json.loads((tmp_path / "forward-costs.json").read_text())
    assert len(saved) == 2 and any("bfloat16" in key for key in saved)


def test_an_unreadable_store_is_measured_and_written_again(counted, tmp_path):
    model, calls = counted
    path = tmp_path / "forward-costs.json"
    path.write_text("{ not json")
    _, measured, _ = _forwards(model, calls, CostStore(path))
    assert measured == 1 + 6 * len(TARGET_SIZES)
    assert len(json.loads(path.read_text())) == 1


def test_a_kept_table_holds_as_it_is_scaled_as_a_whole_or_not_at_all():
    kept = {1: 0.010, 60: 0.030}
    assert scaled(kept, {1: 0.012, 60: 0.027}) == kept  # within 25 %: as it is
    busier = scaled(kept, {1: 0.030, 60: 0.093})  # 3x and 3.1x: the machine is busier
    assert busier is not None and all(
        busier[n] == pytest.approx(kept[n] * (3 * 3.1) ** 0.5) for n in kept
    )
    assert scaled(kept, {1: 0.010, 60: 0.090}) is None  # the sizes moved apart: time again
    assert scaled(kept, {2: 0.010}) is None  # a size the table does not hold


def test_a_model_built_in_memory_is_measured_every_time(tmp_path):
    """A model read from nowhere has no identity a later run could meet: nothing is kept."""
    store = CostStore(tmp_path / "forward-costs.json")
    costs = ForwardCosts(store=store)
    costs.target(tiny_model(1))
    assert not costs.target_reused(tiny_model(1))
    assert not (tmp_path / "forward-costs.json").exists()

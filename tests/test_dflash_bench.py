"""DFlash and DDTree wherever methods are measured: `specdec bench --methods ar,dflash,ddtree
--dflash DIR` (and `dflash@DIR` entries), `specdec sweep` over the block and the tree budget,
Tune's block and tree-size axes, and the window's engine running them (what Compare runs),
each on a tiny target with greedy output identical to `ar`."""

from __future__ import annotations

import json
import threading

import pytest

from app.engine import SpecdecEngine
from app.engine_api import RunRequest, TuneRequest
from specdec_core.cli import main
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Finished
from specdec_core.measurement.sweep_records import Grid
from specdec_core.run.methods import METHODS
from specdec_core.tuning.tune import param_axis, param_candidates, tunable_params
from tests.dflash_tiny import tiny_dflash, write_zlab
from tests.tiny import tiny_loaded, tiny_model, tiny_tokenizer

PROMPTS = ('{"prompt": "w1 w2 w3 w1 w2"}', '{"turns": ["w4 w5 w6 w4 w5 w6 w4"]}')


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A tiny target on disk, two DFlash drafters for it (blocks of 8 and 4) and prompts."""
    root = tmp_path_factory.mktemp("dflash-bench")
    tiny_model(1).save_pretrained(root / "target")
    tiny_tokenizer().save_pretrained(root / "target")
    bound = tiny_loaded(seed=1)
    write_zlab(tiny_dflash(bound, seed=5, block=8), root / "b8")
    write_zlab(tiny_dflash(bound, seed=9, block=4), root / "b4")
    (root / "prompts.jsonl").write_text("\n".join(PROMPTS) + "\n")
    return root


def _written(capsys, out, *argv: str) -> dict:
    assert main([*argv, "--json-out", str(out), "--raw"]) == 0, capsys.readouterr().err
    return json.loads(out.read_text())


def _on_tiny(models) -> tuple[str, ...]:
    """The tiny target in float32 (identity with `ar` is exact there) on the prompts."""
    target = ("--target", str(models / "target"), "--dtype", "float32")
    return (*target, "--prompts", str(models / "prompts.jsonl"))


def test_bench_runs_dflash_and_ddtree_from_the_dflash_flag_identical_to_ar(
    models, tmp_path, capsys
):
    other = f"dflash@{models / 'b4'}"
    result = _written(
        capsys, tmp_path / "bench.json",
        "bench", *_on_tiny(models), "--methods", f"ar,dflash,ddtree,{other}",
        "--dflash", str(models / "b8"), "--max-new-tokens", "16",
    )["methods"]  # fmt: skip
    for label in ("dflash", "ddtree", other):
        assert result[label]["identical_to_ar"] == 1.0, label
        assert result[label]["new_tokens"] > 0
    # the entry's own drafter drafts otherwise than --dflash's (blocks of 4 against 8)
    assert result[other]["mean_accept_length"] != result["dflash"]["mean_accept_length"]


def test_sweep_measures_the_block_and_the_tree_budget(models, tmp_path, capsys):
    record = _written(
        capsys, tmp_path / "sweep.json",
        "sweep", *_on_tiny(models), "--method", "ddtree", "--dflash", str(models / "b8"),
        "--tree-tokens", "4,8", "--method-param-grid", "block=3,8", "--max-new-tokens", "12",
    )  # fmt: skip
    points = [(p["point"], p["identical_to_ar"]) for p in record["points"]]
    assert sorted((p["tree_tokens"], p["method_params.block"]) for p, _ in points) == [
        (4, 3.0), (4, 8.0), (8, 3.0), (8, 8.0),
    ]  # fmt: skip
    assert all(identical == 1.0 for _, identical in points)
    # its best point exports with its block: DDTree's tree has no depth or top-k ("8/None/None")
    capsys.readouterr()
    assert main(["export", "--engine", "vllm", "--from-sweep", str(tmp_path / "sweep.json")]) == 0
    spec = json.loads(capsys.readouterr().out)
    block = record["best"]["point"]["method_params.block"]
    assert spec == {"method": "dflash", "model": str(models / "b8"),
                    "num_speculative_tokens": block - 1}  # fmt: skip


def test_tune_offers_the_block_for_both_and_the_tree_size_for_ddtree():
    for name in ("dflash", "ddtree"):
        method = METHODS[name]
        assert tunable_params(name, method.params) == ("block",)
        assert param_candidates(name, "block") == [3, 4, 6, 8]
    assert METHODS["ddtree"].tree and not METHODS["dflash"].k  # Tune: tree size / no k


def _request(method: str, specs: dict[str, str], **config) -> RunRequest:
    return RunRequest(
        method, "w3 w4 w5 w6 w3 w4", DecodeConfig(max_new_tokens=10, **config), True, specs
    )


def _summary(engine: SpecdecEngine, request: RunRequest):
    events = list(engine.events(request, threading.Event(), lambda *_: None))
    assert isinstance(events[-1], Finished)
    return events[-1].summary


def test_the_windows_engine_runs_both_on_one_loaded_drafter(models, monkeypatch):
    from specdec_core.run import runner

    loads = []
    loader = runner.EXTRA_LOADERS["dflash"]

    def counted(spec, target, progress=None):
        loads.append(spec)
        return loader(spec, target, progress=progress)

    monkeypatch.setitem(runner.EXTRA_LOADERS, "dflash", counted)
    engine = SpecdecEngine(tiny_loaded(seed=1))
    specs = {"dflash": str(models / "b8")}
    greedy = _summary(engine, _request("ar", specs)).token_ids
    summaries = {}
    for method, config in (("dflash", {}), ("ddtree", {"tree_tokens": 6}), ("dflash", {})):
        summaries[method] = _summary(engine, _request(method, specs, **config))
        assert summaries[method].token_ids == greedy, method
    assert loads == [str(models / "b8")]  # one drafter serves both methods
    blocked = _summary(engine, _request("dflash", specs, method_params={"block": 3}))
    assert blocked.token_ids == greedy
    assert len(summaries["dflash"].drafted_per_position) == 7  # a block of 8: 7 drafts
    assert len(blocked.drafted_per_position) == 2  # the block param: 3 rows, 2 drafts


def test_the_windows_tune_measures_the_tree_size_of_ddtree(models):
    engine = SpecdecEngine(tiny_loaded(seed=1))
    specs = {"dflash": str(models / "b8")}
    request = TuneRequest("ddtree", DecodeConfig(max_new_tokens=8), specs)
    result = engine.tune(request, lambda _point: None, threading.Event())
    assert result.setting == "tree_tokens" and [row.k for row in result.table] == [4, 8, 16, 32]
    grid = Grid({param_axis("block"): param_candidates("dflash", "block")})
    assert grid.points()[0] == {"method_params.block": 3}

"""Tune of a method's own parameter (layer-skip's exit layer, SWIFT's skip ratio, lookahead's
W and N), on the fake engine with a measurement whose speed depends on the parameter."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.engine_api import MethodInfo, Registries, TargetInfo
from specdec_core.decoding.config import DecodeConfig
from specdec_core.drafters.layer_skip import PARAMS as LAYER_SKIP_PARAMS
from specdec_core.drafters.lookahead import PARAMS as LOOKAHEAD_PARAMS
from specdec_core.drafters.swift import PARAMS as SWIFT_PARAMS
from specdec_core.errors import SpecdecError
from specdec_core.measurement.sweep_records import Aggregate, Grid, MeasuredPoint
from specdec_core.tuning.tune import param_candidates, tunable_params, tune_result
from tests.gui_fake import FakeEngine, FakeMeasure
from tests.gui_window import make_window_fixture  # noqa: F401  (fixture)

FASTEST = {"skip_ratio": 0.45, "window": 4, "ngram_size": 5, "exit_layer": 15}


class ParamMeasure(FakeMeasure):
    """Fastest at `FASTEST`'s value of each parameter; slower the further from it."""

    def __call__(self, method, config: DecodeConfig, reference):
        measured = super().__call__(method, config, reference)
        if method == "ar":
            return measured
        distance = sum(abs(v - FASTEST[name]) for name, v in config.method_params.items())
        speed = 200.0 / (1.0 + distance)
        return replace(measured, aggregate=replace(measured.aggregate, tokens_per_second=speed))


class ParamEngine(FakeEngine):
    """The fake engine, with the methods that need no training and their parameters."""

    def registries(self) -> Registries:
        base = super().registries()
        methods = (
            MethodInfo("layer-skip", "Layer skip", None, params=LAYER_SKIP_PARAMS),
            MethodInfo("swift", "SWIFT", None, params=SWIFT_PARAMS),
            MethodInfo("lookahead", "Lookahead", None, params=LOOKAHEAD_PARAMS, k=False),
        )
        return Registries(base.methods + methods, base.policies, base.families)


@pytest.fixture
def window(make_window):  # noqa: F811
    engine = ParamEngine()
    engine.measure = ParamMeasure()
    window = make_window(engine)
    window.prompt.set_text("Tell me a story.")
    return window


def choose(window, method: str):
    window.decoding.apply({**window.decoding.values(), "method": method})
    return window.sweep.view.tune_axis


def tune(qtbot, window):
    assert window.sweep.tune()
    qtbot.waitUntil(lambda: not window.sweep.running, timeout=5000)
    return window.sweep.last_result


def test_the_tune_row_offers_a_methods_own_parameters_first(window):
    axis = choose(window, "lookahead")
    items = [axis.itemData(i) for i in range(axis.count())]
    assert items == ["window", "ngram_size"]  # lookahead sizes itself: no k to tune
    assert window.sweep.view.tuned_param() == "window"
    axis = choose(window, "swift")
    assert [axis.itemData(i) for i in range(axis.count())] == ["skip_ratio", ""]  # then k
    axis = choose(window, "classic")
    assert [axis.itemData(i) for i in range(axis.count())] == [""]
    assert window.sweep.view.tuned_param() is None


def test_tune_of_swift_measures_skip_ratios_and_keeps_the_fastest(qtbot, window):
    choose(window, "swift")
    k = window.decoding.k.value()
    result = tune(qtbot, window)
    assert result.setting == "method_params.skip_ratio" and not result.stopped
    assert [row.k for row in result.table] == [0.3, 0.45, 0.6]
    assert result.k == 0.45
    assert window.sweep.method_params.of("swift") == {"skip_ratio": 0.45}
    assert window.decoding.k.value() == k  # the draft length is not what was tuned
    request = window.engine.sweeps[-1]
    assert request.base.max_new_tokens <= 48 and len(request.prompts) == 3
    assert "the skip ratio at 0.45" in window.sweep.view.status.text()
    assert window.sweep.result_box.windowTitle() == "Tune the skip ratio: SWIFT"


def test_the_tuned_value_lands_in_the_method_params_of_what_is_measured_next(qtbot, window):
    choose(window, "lookahead")
    assert tune(qtbot, window).k == 4
    window.sweep.view.tune_axis.setCurrentIndex(1)  # then N, with W as tuned
    result = tune(qtbot, window)
    assert result.setting == "method_params.ngram_size" and result.k == 5
    assert window.sweep.method_params.of("lookahead") == {"window": 4, "ngram_size": 5}
    points = [call for method, call in window.engine.measure.calls if method == "lookahead"]
    assert {call["method_params"]["window"] for call in points[-3:]} == {4}
    config = window.sweep.method_params.applied("lookahead", DecodeConfig())
    assert config.method_params == {"window": 4, "ngram_size": 5}
    assert window.sweep.method_params.applied("swift", DecodeConfig()).method_params == {}


def test_tune_of_the_exit_layer_measures_a_quarter_half_and_three_quarters_of_the_depth(
    qtbot, window
):
    window.session.set_target(TargetInfo("t", "cpu", "float32", 1, {"num_hidden_layers": 30}))
    choose(window, "layer-skip")
    result = tune(qtbot, window)
    assert result.setting == "method_params.exit_layer"
    assert [row.k for row in result.table] == [8, 15, 22] and result.k == 15


def test_tune_of_the_exit_layer_without_a_layer_count_says_what_to_load(window):
    window.session.set_target(TargetInfo("t", "cpu", "float32", 1, {}))
    choose(window, "layer-skip")
    assert not window.sweep.tune()
    assert not window.sweep.running


def test_a_stopped_parameter_tune_keeps_the_value_it_had():
    grid = Grid({"method_params.window": [2, 3, 4]})
    point = MeasuredPoint({"method_params.window": 2}, DecodeConfig(), Aggregate(150.0, 2.0), 100.0)
    result = tune_result("lookahead", "method_params.window", grid, [point], None)
    assert result.stopped and result.k is None
    assert "stopped after 1 of 3 values of window" in result.reason
    assert "Stop cut window=3 short" in result.reason


def test_only_the_parameters_with_candidates_are_tunable():
    assert tunable_params("layer-skip", LAYER_SKIP_PARAMS) == ("exit_layer",)
    assert tunable_params("swift", SWIFT_PARAMS) == ("skip_ratio",)  # not its scoring window
    assert tunable_params("classic", LOOKAHEAD_PARAMS) == ()
    assert param_candidates("layer-skip", "exit_layer", 4) == [1, 2, 3]
    with pytest.raises(SpecdecError, match="it offers: exit_layer"):
        param_candidates("layer-skip", "confidence")


def test_a_run_after_tune_is_asked_with_the_value_tune_chose(qtbot, window):
    choose(window, "swift")
    assert tune(qtbot, window).k == 0.45
    assert window.inputs.request("swift").config.method_params == {"skip_ratio": 0.45}
    assert window.inputs.request("lookahead").config.method_params == {}

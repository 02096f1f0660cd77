"""`specdec tune-policy` picks, per kind of request, the loosest policy parameter within a
distance, and writes a profile that `bench --policy-profile` applies by the prompt's kind."""

from __future__ import annotations

import json

import pytest

from specdec_core.cli import main
from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.measurement.bench import run_bench
from specdec_core.measurement.run_distance import RunDistance
from specdec_core.run.policy_profile import KindSetting, PolicyProfile, load_profile, prompt_feature
from specdec_core.tuning.policy_tuning import Tunable, read_kinds, search, tunable
from tests.tiny import tiny_model, tiny_tokenizer

LOOP = ["w7 w8 w7 w8 w7 w8", "w9 w10 w9 w10 w9"]  # the n-gram drafter drafts a lot here
WORDS = ["w3 w14 w20 w5", "w11 w25 w4 w17"]


def profile(values=(0.3, None)) -> PolicyProfile:
    return PolicyProfile(
        policy="threshold",
        param="tau",
        max_distance=0.05,
        kinds=(
            KindSetting("code", values[0], 0.04, None, 2, (1.0, 0.0), ((0.3, 0.04, None),)),
            KindSetting("chat", values[1], 0.0, 0.0, 3, (0.0, 1.0)),
        ),
        params={},
        method="ngram",
        target="tiny",
    )


def test_a_profile_reads_back_as_written(tmp_path):
    written = profile()
    assert load_profile(written.save(tmp_path / "p.json")) == written


def test_the_nearest_kind_gives_the_parameter_or_the_lossless_rule():
    chosen = profile()
    code, chat = chosen.classify((0.9, 0.2)), chosen.classify((-0.1, 2.0))
    assert (code.kind, chat.kind) == ("code", "chat")
    config = chosen.config_for(code, DecodeConfig())
    assert config.policy == "threshold" and config.policy_params == {"tau": 0.3}
    assert chosen.config_for(chat, DecodeConfig()).policy == "lossless"
    with pytest.raises(SpecdecError, match="tune it again"):
        chosen.classify((1.0, 0.0, 0.0))


def test_a_file_that_is_no_profile_is_refused(tmp_path):
    other = tmp_path / "bench.json"
    other.write_text('{"config": {}}')
    with pytest.raises(SpecdecError, match="not a policy profile"):
        load_profile(other)


def test_kinds_come_from_kind_then_category(tmp_path):
    path = tmp_path / "p.jsonl"
    lines = [
        {"category": "code", "turns": ["a"]},
        {"kind": "chat", "category": "code", "prompt": "b"},
        {"category": "", "turns": ["c"]},
        {"category": "code", "turns": ["d"]},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines))
    assert read_kinds(path) == {"code": ["a", "d"], "chat": ["b"], "general": ["c"]}
    assert read_kinds(path, limit=1)["code"] == ["a"]


def test_the_search_keeps_the_loosest_value_within_the_bound_wherever_it_lies():
    measured = {  # a strict truncation rule at T > 0 can be farther than a looser one
        "code": [0.30, 0.04, 0.02, 0.20],
        "chat": [0.01, 0.09, 0.10, 0.30],
    }
    grid = Tunable("tau", (0.5, 0.2, 0.1, 0.05))

    def measure(kind, value):
        return RunDistance().add(measured[kind][grid.values.index(value)], 0.0)

    found = search(["code", "chat"], grid, 0.05, measure)
    assert found["code"][0] == 0.1 and found["chat"][0] == 0.5
    assert [trial[1] for trial in found["chat"][2]] == measured["chat"]
    assert search(["chat"], grid, 0.001, measure)["chat"][0] is None  # nothing within: lossless


def test_a_policy_without_a_tunable_parameter_is_refused():
    with pytest.raises(SpecdecError, match="no parameter to tune"):
        tunable("lossless")
    with pytest.raises(SpecdecError, match="has no parameter"):
        tunable("threshold", "w", [0.5])
    assert tunable("threshold", None, [0.1, 0.3]).values == (0.3, 0.1)  # strictest first


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tune")
    tiny_model(1).save_pretrained(root / "target")
    tiny_tokenizer().save_pretrained(root / "target")
    prompts = root / "two-kinds.jsonl"
    lines = [{"category": "loop", "turns": [t]} for t in LOOP]
    lines += [{"category": "words", "turns": [t]} for t in WORDS]
    prompts.write_text("\n".join(json.dumps(line) for line in lines))
    return root


def test_tune_policy_picks_a_looser_value_where_the_distance_allows(tiny_dir, capsys):
    out = tiny_dir / "profile.json"
    code = main([
        "tune-policy", "--policy", "threshold", "--max-distance", "0.05",
        "--prompts", str(tiny_dir / "two-kinds.jsonl"), "--target", str(tiny_dir / "target"),
        "--method", "ngram", "--values", "0.5,0.2,0.05,0.01", "--k", "3",
        "--max-new-tokens", "12", "--raw", "--out", str(out),
    ])  # fmt: skip
    table = capsys.readouterr().out
    assert code == 0 and "loop" in table and "words" in table
    tuned = load_profile(out)
    kinds = {kind.kind: kind for kind in tuned.kinds}
    for kind in kinds.values():
        assert kind.value is not None and kind.total_variation <= 0.05
        looser = [trial for trial in kind.trials if trial[0] < kind.value]
        assert all(trial[1] > 0.05 for trial in looser)  # the loosest within the bound
    assert kinds["words"].value < kinds["loop"].value  # the looping prompts drift sooner
    assert len(kinds["loop"].centroid) == 32  # the tiny target's hidden size


def test_bench_applies_the_profile_by_the_prompts_kind(tiny_dir, tiny_target):
    code = KindSetting("loop", 0.01, 0.0, 0.0, 1, prompt_feature(tiny_target, LOOP[0]))
    chat = KindSetting("words", None, 0.0, 0.0, 1, prompt_feature(tiny_target, WORDS[0]))
    chosen = PolicyProfile("threshold", "tau", 0.05, (code, chat))
    config = DecodeConfig(max_new_tokens=6, k=3)
    result = run_bench(
        tiny_target, ["ngram", "ngram:typical"], [LOOP[0], WORDS[0]], config, {}, raw=True,
        profile=chosen,
    )  # fmt: skip
    rows = {(row.method, row.prompt_index): row for row in result.rows}
    assert rows["ngram", 0].policy_kind == "loop" and rows["ngram", 0].policy == "threshold"
    assert rows["ngram", 0].policy_params == {"tau": 0.01}
    assert rows["ngram", 1].policy_kind == "words" and rows["ngram", 1].policy == "lossless"
    assert rows["ngram:typical", 0].policy == "typical"  # its own policy: not profiled
    assert rows["ar", 0].policy_kind is None


def test_bench_refuses_a_policy_beside_a_profile(tiny_dir, tmp_path, capsys):
    written = profile().save(tmp_path / "p.json")
    code = main([
        "bench", "--methods", "ar,ngram", "--prompts", str(tiny_dir / "two-kinds.jsonl"),
        "--target", str(tiny_dir / "target"), "--policy", "threshold",
        "--policy-profile", str(written),
    ])  # fmt: skip
    assert code == 2 and "drop --policy" in capsys.readouterr().err

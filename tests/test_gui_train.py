"""The Train tab: generation and training run as child processes on a tiny target, their
progress arrives in the tab, Stop then Resume continues on the same work folder (no batch
lost), and the finished head appears in the Head picker."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.training_plan import default_work, read_generation
from tests.gui_window import make_window_fixture  # noqa: F401 (a fixture)
from tests.slow_engine import aim_train_tab
from tests.tiny import chat_target


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("train-tab")
    return chat_target(root, conversations=400), root / "chats.json"


def _shards(work: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted((work / "data" / "shards").glob("*/*.shard")):
        found.setdefault(path.parent.name, []).append(path.name)
    return found


@pytest.mark.slow
def test_train_tab_shows_progress_stops_resumes_and_lists_the_finished_head(
    make_window, qtbot, tiny_target, monkeypatch
):
    target, _ = tiny_target
    window = make_window()
    training, view = window.training, window.training.view
    aim_train_tab(training, tiny_target, batch=6, long_batch=3, batch_tokens=512, epochs=2)
    work = default_work(str(target), "eagle1")
    assert "trained-heads" in str(work) and not str(work).startswith(str(Path.cwd()))

    view.start_button.click()
    qtbot.waitUntil(lambda: (read_generation(work) or _NONE).batches >= 1, timeout=120_000)
    qtbot.waitUntil(lambda: "answer tokens" in view.generation_text.text(), timeout=5000)
    view.stop_button.click()
    qtbot.waitUntil(lambda: not training.running, timeout=30_000)
    stopped = read_generation(work)
    assert stopped is not None and stopped.state == "stopped"
    assert view.resume_button.isEnabled() and "Resume" in view.state.text()
    before = _shards(work)

    view.resume_button.click()
    qtbot.waitUntil(lambda: view.compare_button.isEnabled(), timeout=300_000)
    after = _shards(work)
    for source, names in before.items():  # every batch kept, numbered without a gap
        assert after[source][: len(names)] == names
    for names in after.values():
        assert names == [f"{n:06d}.shard" for n in range(len(names))]
    assert "resuming after" in (work / "generation.log").read_text()
    assert read_generation(work).state == "finished"
    assert "ETA done" in view.training_text.text() and "tokens/s" in view.training_text.text()
    epochs, _ = view.top1_line.getData()
    assert list(epochs) == [1, 2]  # validation per epoch, plotted

    head = str(work / "head")
    assert head in window.models.head.recent()
    assert any(text.startswith(head) for text, _ in window.models.head.local_items())
    assert window.models.head.spec() != head  # the selected head is kept until Compare

    # why its tau is what it is: the evidence beside the window, then the tab is ready again
    assert view.why_button.isEnabled()
    view.why_button.click()
    assert not view.why_button.isEnabled() and not view.start_button.isEnabled()
    qtbot.waitUntil(lambda: view.why_button.isEnabled(), timeout=300_000)
    assert view.why.isVisible()
    why = view.why.text()
    assert why.startswith("top-1 by draft position: "), why
    assert "a chain of 4 implies τ" in why and "of the answer tokens" in why
    assert "to do: " in why and view.compare_button.isEnabled()


class _None:
    batches = 0


_NONE = _None()

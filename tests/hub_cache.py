"""A Hugging Face cache in a temporary folder, laid out as huggingface_hub writes it, and a fake
hub that serves files from a folder and records what was asked (nothing leaves the machine).

`models--owner--name/{blobs/<hash>, refs/<ref>, snapshots/<commit>/<file> -> blobs}`; a file
given as `incomplete` exists only as `blobs/<hash>.incomplete` (a download cut off half-way).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub import constants
from huggingface_hub.hf_api import RepoSibling

from specdec_core.models import hub


def use_cache(monkeypatch, root: Path, offline: bool = True) -> Path:
    """Point huggingface_hub at `root` (an empty cache) and set it offline or online."""
    root.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1" if offline else "0")
    return root


def cache_repo(
    cache: Path,
    repo: str,
    source: Path,
    commit: str = "a" * 40,
    ref: str = "main",
    incomplete: tuple[str, ...] = (),
) -> Path:
    """Put every file of `source` into `cache` as snapshot `commit` of `repo`; -> snapshot."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / ref).write_text(commit)
    snapshot = folder / "snapshots" / commit
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        name = str(path.relative_to(source))
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        blob = folder / "blobs" / digest
        blob.parent.mkdir(parents=True, exist_ok=True)
        if name in incomplete:
            data = path.read_bytes()
            blob.with_name(digest + ".incomplete").write_bytes(data[: len(data) // 2])
            continue
        shutil.copyfile(path, blob)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
    return snapshot


@dataclass
class FakeHub:
    """`model_info` lists `source` (plus `extra` names that are never served); `hf_hub_download`
    copies a file into a snapshot folder, in chunks through `tqdm_class`, and records it."""

    source: Path
    out: Path
    extra: dict[str, int] = field(default_factory=dict)
    chunks: int = 4
    delay: float = 0.0  # seconds per chunk of the weights (model.safetensors); the rest: none
    asked: list[str] = field(default_factory=list)
    fail: Exception | None = None

    def install(self, monkeypatch) -> FakeHub:
        hub_ref = self

        class Api:
            def model_info(self, repo, revision=None, files_metadata=False):
                if hub_ref.fail is not None:
                    raise hub_ref.fail
                siblings = [
                    RepoSibling(str(p.relative_to(hub_ref.source)), p.stat().st_size)
                    for p in hub_ref.source.rglob("*")
                    if p.is_file()
                ] + [RepoSibling(name, size) for name, size in hub_ref.extra.items()]
                return type("Info", (), {"siblings": siblings, "sha": "b" * 40})()

        monkeypatch.setattr(hub, "HfApi", Api)
        monkeypatch.setattr(hub, "hf_hub_download", self.download)
        return self

    def download(self, repo, filename, revision=None, tqdm_class=None):
        self.asked.append(filename)
        if filename in self.extra:
            raise AssertionError(f"{filename} should never be downloaded")
        data = (self.source / filename).read_bytes()
        target = self.out / revision / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        if tqdm_class is not None:
            bar = tqdm_class(total=len(data), initial=0, desc=filename)
            step = max(1, len(data) // self.chunks)
            for start in range(0, len(data), step):
                time.sleep(self.delay if filename == "model.safetensors" else 0.0)
                bar.update(len(data[start : start + step]))
            bar.close()
        target.write_bytes(data)
        return str(target)


def tiny_repo(folder: Path, seed: int = 1) -> Path:
    """A tiny model directory (tests/tiny.py) as a repo would hold it."""
    from tests.tiny import tiny_model, tiny_tokenizer

    tiny_model(seed).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder

"""The files a checkpoint is made of, and whether they are whole, checked before loading.

`weight_names` picks the weights `from_pretrained` reads, in its order of preference: the
shards named by `model.safetensors.index.json`, `model.safetensors`, the shards of
`pytorch_model.bin.index.json`, `pytorch_model.bin`. Nothing else (an `original/` copy of the
weights, other formats) is read or downloaded. `check_weights` reads only headers: a
safetensors file shorter than its header says, or a zip-format `pytorch_model.bin` without its
central directory (both what a cut-off download or copy leaves), is refused with a one-line
message before any tensor is read. Pickled checkpoints are only ever read with
`torch.load(..., weights_only=True)` (here, in weights_file.py, and inside transformers).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

from specdec_core.errors import SpecdecError

CONFIG = "config.json"
SAFE_INDEX, SAFE = "model.safetensors.index.json", "model.safetensors"
BIN_INDEX, BIN = "pytorch_model.bin.index.json", "pytorch_model.bin"
# what AutoTokenizer / GenerationConfig may read; each is fetched only when the repo has it
TOKENIZER_FILES = (
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "chat_template.jinja",
    "chat_template.json",
)


def weight_names(names: Iterable[str], read_index: Callable[[str], str]) -> list[str]:
    """The weight files to read among `names` (top-level file names), an index file first;
    `read_index(name)` returns an index file's text. [] when there are none."""
    names = set(names)
    for index, single in ((SAFE_INDEX, SAFE), (BIN_INDEX, BIN)):
        if index in names:
            try:
                weight_map = json.loads(read_index(index))["weight_map"]
            except (ValueError, KeyError, TypeError):
                raise SpecdecError(
                    f"{index} is not a valid weight index; download the model again"
                ) from None
            return [index, *sorted(set(weight_map.values()))]
        if single in names:
            return [single]
    return []


def weight_files(directory: Path) -> list[Path]:
    """The weight files in a model directory (see `weight_names`), without the index."""
    names = [p.name for p in directory.iterdir()] if directory.is_dir() else []
    chosen = weight_names(names, lambda name: (directory / name).read_text(encoding="utf-8"))
    return [directory / name for name in chosen if not name.endswith(".index.json")]


def check_weights(directory: Path, spec: str) -> list[Path]:
    """The weight files of `directory`, each checked whole; a SpecdecError saying what to do
    when one is missing, truncated or not a checkpoint."""
    files = weight_files(directory)
    if not files:
        raise SpecdecError(
            f"{spec} has no weights (model.safetensors, pytorch_model.bin or a sharded index); "
            "point to a complete model directory"
        )
    for path in files:
        if not path.is_file():
            raise SpecdecError(
                f"{spec} is missing {path.name}, which its index names; download or copy "
                "the model again"
            )
        if path.suffix == ".safetensors":
            _check_safetensors(path, spec)
        else:
            _check_pickle(path, spec)
    return files


def safetensors_header(path: Path) -> dict:
    """The JSON header of a safetensors file (tensor names, dtypes, shapes, offsets);
    ValueError when it has none."""
    return _read_header(path)[1]


def _read_header(path: Path) -> tuple[int, dict]:
    with path.open("rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        if length <= 0 or length > 100_000_000:
            raise ValueError("no safetensors header")
        header = json.loads(handle.read(length))
    if not isinstance(header, dict):
        raise ValueError("the header is not an object")
    return length, header


def _check_safetensors(path: Path, spec: str) -> None:
    size = path.stat().st_size
    try:
        length, header = _read_header(path)
        end = max(
            (int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"),
            default=0,
        )
    except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError):
        raise SpecdecError(
            f"{path.name} in {spec} is not a valid safetensors file (corrupt header); "
            "download or copy it again"
        ) from None
    if 8 + length + end > size:
        raise SpecdecError(
            f"{path.name} in {spec} is truncated ({size:,} of {8 + length + end:,} bytes); "
            "the download or copy was cut off: download or copy it again"
        )


def _check_pickle(path: Path, spec: str) -> None:
    with path.open("rb") as handle:
        magic = handle.read(4)
    if magic[:2] != b"PK":  # torch's legacy (pre-1.6) format: torch.load checks it
        if magic[:1] != b"\x80":
            raise SpecdecError(
                f"{path.name} in {spec} is not a PyTorch checkpoint; download or copy it again"
            )
        return
    try:
        with zipfile.ZipFile(path) as archive:
            archive.infolist()
    except (zipfile.BadZipFile, OSError):
        raise SpecdecError(
            f"{path.name} in {spec} is truncated or corrupt (not a complete zip archive); "
            "the download or copy was cut off: download or copy it again"
        ) from None

"""Models on this machine: the Hugging Face cache and folders the user added; no torch.

`list_local(folders)` lists what `huggingface_hub.scan_cache_dir` finds (id, size on disk, last
used) and, in each added folder, `.gguf` files and model directories (a `config.json`), each
classified from its config.json and weight names (`eagle/layouts.py`): a causal LM, an EAGLE-1
head, an EAGLE-3 head, or other. Only small files are read (configs, weight indexes,
safetensors headers), so a listing takes milliseconds.

`fits(target_config, candidate)` says why a head or draft cannot serve a target (None when it
can): a head needs the target's hidden size and vocabulary, a draft the target's vocabulary
(its tokenizer is compared when it loads). `ranked` puts what fits first, the heads their
publishers name for the target (`KNOWN_HEADS`) at the very top.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from specdec_core.files import format_size
from specdec_core.heads.eagle.layouts import declared_kind, flat_config, layout_of
from specdec_core.models.checkpoint import CONFIG, safetensors_header, weight_files

KINDS = {"causal-lm": "causal LM", "eagle1": "EAGLE-1 head", "eagle3": "EAGLE-3 head",
         "other": "other"}  # fmt: skip

# target -> EAGLE heads published for it (the ids their publishers document: SafeAILab/EAGLE's
# README, SGLang's docs, Tencent AngelSlim, tests/fixtures/eagle-heads/SOURCES.md)
KNOWN_HEADS: dict[str, tuple[str, ...]] = {
    "meta-llama/Llama-3.1-8B-Instruct": (
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B",
    ),
    "meta-llama/Meta-Llama-3-8B-Instruct": ("yuhuili/EAGLE-LLaMA3-Instruct-8B",),
    "meta-llama/Meta-Llama-3-70B-Instruct": ("yuhuili/EAGLE-LLaMA3-Instruct-70B",),
    "meta-llama/Llama-2-7b-chat-hf": ("yuhuili/EAGLE-llama2-chat-7B",),
    "meta-llama/Llama-2-13b-chat-hf": ("yuhuili/EAGLE-llama2-chat-13B",),
    "meta-llama/Llama-2-70b-chat-hf": ("yuhuili/EAGLE-llama2-chat-70B",),
    "lmsys/vicuna-7b-v1.3": ("yuhuili/EAGLE-Vicuna-7B-v1.3",),
    "lmsys/vicuna-13b-v1.3": ("yuhuili/EAGLE-Vicuna-13B-v1.3",),
    "lmsys/vicuna-33b-v1.3": ("yuhuili/EAGLE-Vicuna-33B-v1.3",),
    "Qwen/Qwen3-8B": ("Tengyunw/qwen3_8b_eagle3", "AngelSlim/Qwen3-8B_eagle3"),
}


@dataclass(frozen=True)
class LocalModel:
    spec: str  # what a picker loads: a hub id or a path
    kind: str  # a key of KINDS
    size: int  # bytes on disk
    last_used: float | None = None  # seconds since the epoch (the cache's last access)
    where: str = "hub cache"  # or the added folder it was found in
    config: dict = field(default_factory=dict, compare=False)  # its config.json ({}: GGUF)

    @property
    def label(self) -> str:
        return f"{format_size(self.size)}, {KINDS[self.kind]}"


def suggested_heads(target_spec: str) -> tuple[str, ...]:
    """The heads published for `target_spec` (a hub id, any @revision ignored)."""
    repo = target_spec.strip().partition("@")[0].lower()
    return next((heads for t, heads in KNOWN_HEADS.items() if t.lower() == repo), ())


def list_local(folders: list[str] | tuple[str, ...] = ()) -> list[LocalModel]:
    """What is on this machine: the Hugging Face cache, then each folder in `folders`."""
    return [*_hub_cache(), *(m for folder in folders for m in _folder(Path(folder)))]


def classify(directory: Path, name: str = "") -> tuple[str, dict]:
    """(kind, config.json) of a model or head directory (`name`: its hub id or path). Heads
    saved as pytorch_model.bin (the early EAGLE heads) have a plain Llama config and no names
    to read: a one-layer config or 'eagle' in the name then says head."""
    try:
        config = json.loads((directory / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "other", {}
    if not isinstance(config, dict):
        return "other", {}
    names = _weight_names(directory)
    layout = layout_of(names) or declared_kind(config)
    if layout is not None:
        return layout, config
    name = (name or str(directory)).lower()
    if not names and ("eagle" in name or config.get("num_hidden_layers") == 1):
        return ("eagle3" if "eagle3" in name else "eagle1"), config
    architectures = config.get("architectures") or []
    if any(str(a).endswith(("ForCausalLM", "LMHeadModel")) for a in architectures):
        return "causal-lm", config
    return "other", config


def fits(target_config: dict, candidate: LocalModel) -> str | None:
    """Why `candidate` (a head or a draft) cannot serve a target with `target_config`; None
    when it can (or when that is only known once it loads, e.g. a GGUF draft)."""
    target = target_config.get("text_config") or target_config
    hidden, vocab = target.get("hidden_size"), target.get("vocab_size")
    config = flat_config(candidate.config)
    config = config.get("text_config") or config
    if candidate.kind in ("eagle1", "eagle3"):
        if config.get("hidden_size") != hidden:
            return f"hidden size {config.get('hidden_size')}, the target's is {hidden}"
        head_vocab = config.get("target_vocab_size") or config.get("vocab_size")
        if head_vocab != vocab:
            return f"vocabulary of {head_vocab} tokens, the target's has {vocab}"
        return None
    if candidate.kind != "causal-lm":
        return f"not a causal LM or an EAGLE head ({KINDS[candidate.kind]})"
    if config and config.get("vocab_size") != vocab:
        return f"another tokenizer: {config.get('vocab_size')} tokens, the target's has {vocab}"
    return None


def ranked(
    target_config: dict, candidates: list[LocalModel], target_spec: str = ""
) -> list[tuple[LocalModel, str | None]]:
    """(candidate, why it does not fit or None): the published heads for the target first,
    then what fits, then the rest."""
    known = [h.lower() for h in suggested_heads(target_spec)]
    pairs = [(c, fits(target_config, c)) for c in candidates]

    def order(pair: tuple[LocalModel, str | None]) -> tuple[int, int, str]:
        model, reason = pair
        rank = known.index(model.spec.lower()) if model.spec.lower() in known else len(known)
        return (reason is not None, rank, model.spec.lower())

    return sorted(pairs, key=order)


def _weight_names(directory: Path) -> list[str]:
    """Tensor names of a checkpoint from its index or first safetensors header; [] for
    pickled weights (names unknown without reading them)."""
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        try:
            return list(json.loads((directory / index).read_text())["weight_map"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    try:
        files = [f for f in weight_files(directory) if f.suffix == ".safetensors"]
        header = safetensors_header(files[0]) if files else {}
    except (OSError, ValueError, IndexError):
        return []
    return [key for key in header if key != "__metadata__"]


def _hub_cache() -> list[LocalModel]:
    from huggingface_hub import constants, scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(constants.HF_HUB_CACHE)
    except (CacheNotFound, OSError):
        return []
    found = []
    for repo in info.repos:
        if repo.repo_type != "model" or not repo.revisions:
            continue
        revision = max(repo.revisions, key=lambda r: r.last_modified)
        kind, config = classify(Path(revision.snapshot_path), repo.repo_id)
        found.append(
            LocalModel(repo.repo_id, kind, repo.size_on_disk, repo.last_accessed, config=config)
        )
    return sorted(found, key=lambda m: -(m.last_used or 0))


def _folder(folder: Path) -> list[LocalModel]:
    """`.gguf` files and model directories in `folder` and one level below."""
    if not folder.is_dir():
        return []
    found = []
    for path in sorted([folder, *(p for p in folder.iterdir() if p.is_dir())]):
        try:
            entries = list(path.iterdir())
        except OSError:
            continue
        for gguf in sorted(p for p in entries if p.suffix.lower() == ".gguf" and p.is_file()):
            stat = gguf.stat()
            found.append(
                LocalModel(str(gguf), "causal-lm", stat.st_size, stat.st_atime, str(folder))
            )
        if (path / CONFIG).is_file():
            kind, config = classify(path)
            size = sum(p.stat().st_size for p in entries if p.is_file())
            used = max(p.stat().st_atime for p in entries if p.is_file())
            found.append(LocalModel(str(path), kind, size, used, str(folder), config))
    return found

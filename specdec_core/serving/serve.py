"""`specdec export --serve`: the whole server command line for a tuned setting.

Built on `specdec_core.serving.export.export()` (its speculative JSON / flags and its example
command, which already names the served model), with the dtype and the tensor-parallel size added:

- vLLM:   `vllm serve MODEL --speculative-config '{...}' --dtype D [--tensor-parallel-size N]`
- SGLang: `python -m sglang.launch_server --model-path MODEL --speculative-… --dtype D
  [--tp N] --enable-metrics` (SGLang serves `/metrics` only with `--enable-metrics`; vLLM
  always does), so `specdec watch` / the Server tab can follow the server it starts.

Sources: vLLM's engine arguments (`--dtype` auto, half, float16, bfloat16, float, float32;
`--tensor-parallel-size`, `-tp`) and SGLang's server arguments (`--dtype` with the same
names; `--tp-size`, alias `--tp`; `--enable-metrics`, docs/references/production_metrics).
The playground's dtype names (auto, float32, float16, bfloat16) are valid in both.
Every method `export` serves (EAGLE, classic, n-gram, Medusa, MLP speculator, native MTP) has
its command here; what an engine cannot serve is `export`'s one-line refusal. vLLM runs an MLP
speculator on one GPU whatever the target's tensor-parallel size (`_verify_and_get_draft_tp`
in vllm/config/speculative.py), which the notes say.

Arguments are kept as a list and joined with `shlex.join`, so a path with spaces or the JSON
survives a shell. `write_script` saves one as an executable bash script. Importing this
module does not import torch (the window imports it at startup).
"""

from __future__ import annotations

import re
import shlex
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.serving.export import export

DTYPES = ("auto", "float32", "float16", "bfloat16")
TP_FLAG = {"vllm": "--tensor-parallel-size", "sglang": "--tp"}


@dataclass(frozen=True)
class ServeCommand:
    engine: str
    method: str
    argv: tuple[str, ...]
    notes: list[str] = field(default_factory=list)

    @property
    def command(self) -> str:
        """The command line, quoted for a POSIX shell."""
        return shlex.join(self.argv)

    def to_record(self) -> dict:
        return {
            "engine": self.engine,
            "method": self.method,
            "command": self.command,
            "argv": list(self.argv),
            "notes": list(self.notes),
        }


def serve_command(
    engine: str,
    method: str,
    config: DecodeConfig,
    target: str = "embedded",
    model: str = "",
    dtype: str = "auto",
    tensor_parallel_size: int = 1,
) -> ServeCommand:
    """The server command serving `target` with `method` at `config` (see `export`); the
    tensor-parallel flag is left out at 1. Raises `SpecdecError` for what cannot be served."""
    if dtype not in DTYPES:
        raise SpecdecError(f"unknown dtype '{dtype}'; choose one of: {', '.join(DTYPES)}")
    if tensor_parallel_size < 1:
        raise SpecdecError(
            f"--tensor-parallel-size must be at least 1 (got {tensor_parallel_size})"
        )
    result = export(engine, method, config, target, model)
    argv = [*shlex.split(result.command), "--dtype", dtype]
    notes = list(result.notes)
    if tensor_parallel_size > 1:
        argv += [TP_FLAG[engine], str(tensor_parallel_size)]
        if engine == "vllm" and method == "mlp-speculator":
            notes.append(
                "vLLM runs the MLP speculator unsharded (draft tensor-parallel size 1, "
                "_verify_and_get_draft_tp) beside the sharded target"
            )
    if engine == "sglang":
        argv.append("--enable-metrics")
        notes.append("--enable-metrics: SGLang serves /metrics (for `specdec watch`) only with it")
    return ServeCommand(engine, method, tuple(argv), notes)


def tensor_parallel_size(device_map: Mapping[str, object] | Iterable[object] | str | None) -> int:
    """How many GPUs a model is spread over: the distinct CUDA devices of a device map
    (`{"model.layers.0": 0, "lm_head": "cuda:1", ...}`, a list of devices, or a device string
    such as "cuda:0,cuda:1"); 1 when it sits on one device, the CPU or MPS."""
    if device_map is None:
        return 1
    if isinstance(device_map, str):
        devices: Iterable[object] = device_map.split(",")
    elif isinstance(device_map, Mapping):
        devices = device_map.values()
    else:
        devices = device_map
    gpus = set()
    for device in devices:
        text = str(device).strip()
        if isinstance(device, int) or text.isdigit():
            gpus.add(int(text))
        elif match := re.fullmatch(r"cuda(?::(\d+))?", text):
            gpus.add(int(match.group(1) or 0))
    return max(1, len(gpus))


def shell_script(command: ServeCommand) -> str:
    """A bash script that starts the server (notes as comments)."""
    engine = {"vllm": "vLLM", "sglang": "SGLang"}[command.engine]
    lines = [
        "#!/usr/bin/env bash",
        f"# Serve the speculative setting '{command.method}' with {engine}"
        " (exported from specdec-playground).",
        *(f"# {note}" for note in command.notes),
        "set -euo pipefail",
        f'exec {command.command} "$@"',
    ]
    return "\n".join(lines) + "\n"


def write_script(command: ServeCommand, path: str | Path) -> Path:
    """Write `shell_script(command)` to `path` and make it executable; returns the path."""
    path = Path(path)
    path.write_text(shell_script(command), encoding="utf-8")
    mode = stat.S_IMODE(path.stat().st_mode)
    path.chmod(mode | stat.S_IXUSR | (mode & 0o044) >> 2)  # executable where readable
    return path

"""Where a number was measured: the date, the machine and the versions that a benchmark file or a
trained model's card records beside its numbers, so that numbers from different machines are
never compared unknowingly."""

from __future__ import annotations

import platform
import shlex
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Environment:
    """The machine and software a run used (`to_record`: what a JSON file holds)."""

    date: str  # UTC, ISO 8601, to the second
    machine: str  # the CPU model, and the GPU's name where the run used one
    cpu_threads: int  # torch's intra-op threads
    cpu_isa: str  # the vector instructions torch's CPU kernels use, and bf16 / AMX support
    os: str
    python: str
    torch: str
    transformers: str
    command: str | None = None  # the command line, where the caller gives it

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


def command_line(argv: list[str] | None = None) -> str:
    """The `specdec` command line this process runs (`argv`: its arguments, default
    sys.argv's), however it was started (`specdec`, `python -m specdec_core.cli`)."""
    return shlex.join(["specdec", *(sys.argv[1:] if argv is None else argv)])


# CPU flags that change which kernels run (bf16 matmuls, AMX tiles)
NOTABLE_FLAGS = ("avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")


def _cpuinfo(key: str) -> str | None:
    """The first `key` line's value in /proc/cpuinfo (Linux), else None."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what the platform reports."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_isa() -> str:
    """torch's CPU capability (e.g. AVX512), with the notable flags the CPU has."""
    import torch

    flags = set((_cpuinfo("flags") or "").split())
    notable = [flag for flag in NOTABLE_FLAGS if flag in flags]
    capability = torch.backends.cpu.get_cpu_capability()
    return f"{capability} ({', '.join(notable)})" if notable else capability


def current_environment(
    device: torch.device | str = "cpu", command: str | None = None
) -> Environment:
    """This process's environment, for a run on `device`."""
    import torch
    import transformers

    machine = f"{cpu_model()} ({platform.machine()})"
    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        machine += f", {torch.cuda.get_device_name(torch.device(device))}"
    return Environment(
        date=datetime.now(UTC).replace(microsecond=0).isoformat(),
        machine=machine,
        cpu_threads=torch.get_num_threads(),
        cpu_isa=cpu_isa(),
        os=platform.platform(terse=True),
        python=sys.version.split()[0],
        torch=torch.__version__,
        transformers=transformers.__version__,
        command=command,
    )

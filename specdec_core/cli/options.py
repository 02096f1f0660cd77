"""The flags every `specdec` command shares, and their translation into engine types, once.

- `add_model_options`: `--target`, `--draft`, `--head`, `--device`, `--dtype`, and how the
  target is placed and trusted: `--device-map`, `--max-memory`, `--trust-remote-code`;
  `load_options` turns those into a `LoadOptions`.
- `add_adapt_options` / `adapt_settings`: `--adapt` (generate, bench), checked early.
- `add_decode_options`: the decoding settings. With `sweep=True` the settings a sweep can vary
  (`SWEEP_AXES`) are declared as comma-separated lists instead of single values, so `sweep`
  declares each flag once, with the meaning it has there.
- `decode_config`: the parsed flags as a checked `DecodeConfig`; `model_specs`: the draft /
  head specs; `resolve_auto_k`: `--k auto`, measured once the models are loaded.
- `add_policy_profile_option` / `policy_profile`: `--policy-profile FILE`, a profile written by
  `specdec tune-policy`, read and checked before any model loads.

Nothing past the CLI sees an argparse namespace: commands turn it into these typed values.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from specdec_core.decoding.config import MAX_K, DecodeConfig, parse_params
from specdec_core.errors import SpecdecError

if TYPE_CHECKING:
    from specdec_core.models.loading import LoadedModel, LoadOptions
    from specdec_core.run.policy_profile import PolicyProfile
    from specdec_core.tuning.sweep import SweepProgress

AUTO = "auto"


@dataclass(frozen=True)
class Axis:
    """A decoding setting `specdec sweep` can vary: its config field, type, smallest value,
    and whether 'auto' (sized for the device) is a value."""

    field: str
    cast: type
    low: float | None
    auto: bool = False
    choices: tuple[str, ...] = ()  # the names a value may take (empty: any)


SWEEP_AXES = {
    "k": Axis("k", int, 0),
    "temperature": Axis("temperature", float, 0.0),
    "tree_tokens": Axis("tree_tokens", int, 2, auto=True),
    "tree_depth": Axis("tree_depth", int, 1, auto=True),
    "tree_topk": Axis("tree_topk", int, 1, auto=True),
    "k_schedule": Axis("k_schedule", str, None, choices=("fixed", "adaptive")),
}


def parse_tokens(text: str, also: str = "") -> int:
    """'10M', '500k', '4.5m' or a plain count -> the count; a clear error otherwise (`also`:
    what else the flag takes, for the message)."""
    scale = {"k": 1_000, "m": 1_000_000}.get(text.strip()[-1:].lower(), 1)
    number = text.strip()[:-1] if scale > 1 else text.strip()
    try:
        value = round(float(number) * scale)
    except ValueError:
        raise SpecdecError(
            f"--tokens {text}: use a count such as 4M, 500k or 10000000{also}"
        ) from None
    if value <= 0:
        raise SpecdecError(f"--tokens {text}: must be more than 0")
    return value


def add_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="embedded", help="embedded, hub id, dir or .gguf")
    parser.add_argument("--draft", default="embedded", help="classic draft model spec")
    parser.add_argument(
        "--head",
        default="embedded",
        help="EAGLE head: embedded (bundled), embedded-eagle3 (bundled EAGLE-3), embedded-vN "
        "(one it replaced), a folder or hub id",
    )
    parser.add_argument(
        "--medusa",
        default="embedded",
        help="Medusa heads (FasterDecoding's or vLLM's layout): embedded (bundled), a folder "
        "or hub id",
    )
    parser.add_argument(
        "--mtp",
        default="embedded",
        help="the checkpoint whose native MTP layers draft (methods mtp, mtp-tree): embedded "
        "(default) reads the target's own; or another copy of it (folder or hub id)",
    )
    parser.add_argument(
        "--speculator",
        default="embedded",
        help="MLP speculator (vLLM's layout): embedded (bundled), a folder or hub id",
    )
    parser.add_argument(
        "--dflash",
        default="embedded",
        help="DFlash block drafter (methods dflash, ddtree; z-lab's or the speculators layout): "
        "embedded (bundled), a folder or hub id",
    )
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    parser.add_argument(
        "--dtype", default="auto", choices=["auto", "float32", "float16", "bfloat16"]
    )
    parser.add_argument(
        "--device-map",
        default=None,
        choices=["auto", "balanced", "sequential"],
        help="split a model larger than the GPU over the GPUs, then the CPU, then disk "
        "(accelerate); --device is then not used",
    )
    parser.add_argument(
        "--max-memory",
        default=None,
        metavar="DEVICE=SIZE[,...]",
        help="with --device-map: the most each device may hold, e.g. 0=20GiB,cpu=64GiB",
    )
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow a model that runs its own Python code (config.json auto_map); read it first",
    )


def add_exclude_prompts(
    parser: argparse.ArgumentParser, what: str, default: str | None = "environment"
) -> None:
    """`--exclude-prompts`: evaluation prompt files that `what` must never match or nearly
    match (default $SPECDEC_EVAL_PROMPTS; `default=None` leaves it to the caller)."""
    parser.add_argument(
        "--exclude-prompts",
        default=os.environ.get("SPECDEC_EVAL_PROMPTS", "") if default == "environment" else None,
        help=f"evaluation prompt files (JSONL; comma-separated paths or globs) that {what} "
        "must never match or nearly match, e.g. your benchmark sets (default: "
        "$SPECDEC_EVAL_PROMPTS); the built-in held-out prompts per kind are always excluded",
    )


def load_options(args: argparse.Namespace, prompts: Sequence[str] = ()) -> LoadOptions:
    """The placement flags as a checked `LoadOptions` (before any model loads). The memory
    check reserves KV cache for the longest of `prompts` (at most a token per character) and
    --max-new-tokens. Downloads draw tqdm bars on stderr."""
    from specdec_core.models.loading import LoadOptions
    from specdec_core.models.memory import parse_max_memory

    if args.max_memory and args.device_map is None:
        raise SpecdecError("--max-memory needs --device-map (e.g. --device-map auto)")
    return LoadOptions(
        device_map=args.device_map,
        max_memory=parse_max_memory(args.max_memory),
        trust_remote_code=args.trust_remote_code,
        context=max(map(len, prompts), default=0) + args.max_new_tokens + 256,
        bars=True,
    )


def add_decode_options(parser: argparse.ArgumentParser, *, sweep: bool = False) -> None:
    """The decoding flags; with `sweep`, those in `SWEEP_AXES` take comma-separated values."""

    def setting(flag: str, help: str, **single: Any) -> None:
        dest = flag.removeprefix("--").replace("-", "_")
        if sweep and dest in SWEEP_AXES:
            axis = SWEEP_AXES[dest]
            kind = {int: "integers", float: "numbers", str: "names"}[axis.cast]
            extra = " ('auto' = sized for the device)" if axis.auto else ""
            parser.add_argument(flag, default=None, help=f"{help}: comma-separated {kind}{extra}")
        else:
            parser.add_argument(flag, help=help, **single)

    parser.add_argument("--max-new-tokens", type=int, default=128)
    setting("--k", "draft length for chain methods, or auto (measured)", type=k_value, default=4)
    setting(
        "--k-schedule",
        "adaptive: k grows after a fully accepted draft, shrinks after a rejection",
        default="fixed",
        choices=list(SWEEP_AXES["k_schedule"].choices),
    )
    setting("--temperature", "sampling temperature (0 = greedy)", type=float, default=0.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    setting("--tree-depth", "EAGLE-2 tree depth", type=int, default=None)
    setting("--tree-topk", "EAGLE-2 children per node", type=int, default=None)
    setting("--tree-tokens", "EAGLE-2 tree size, or auto", default=AUTO)
    parser.add_argument(
        "--ngram-max", type=int, default=3, help="longest n-gram the ngram drafter looks up"
    )
    parser.add_argument(
        "--policy",
        default="lossless",
        help=f"verification policy with its parameters and defaults: {_policies()}. "
        "Lossy ones trade fidelity for acceptance and are marked LOSSY in all output; "
        "on a tree method each applies per path (the longest approved path wins)",
    )
    parser.add_argument(
        "--policy-param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a policy parameter, e.g. --policy-param tau=0.3 (repeatable): tau (threshold, "
        "cosine, ngram), epsilon and delta (typical), n, ngram_tau and logit_tau (ngram, "
        "hybrid), w (ensemble), entropy_threshold and window (fly)",
    )
    parser.add_argument(
        "--method-param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a parameter of the method, e.g. --method-param exit_layer=12 (repeatable); "
        "`specdec methods` lists each method's parameters and defaults",
    )
    parser.add_argument("--raw", action="store_true", help="do not apply the chat template")


def add_policy_profile_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--policy-profile",
        default=None,
        metavar="FILE",
        help="a policy profile from `specdec tune-policy`: the kind of each prompt is picked "
        "(nearest kind by the target's mean input embedding of the prompt), then the policy "
        "and parameter the profile gives that kind; instead of --policy",
    )


def policy_profile(args: argparse.Namespace, config: DecodeConfig) -> PolicyProfile | None:
    """The `--policy-profile` file read and checked (None without one); it chooses the policy,
    so --policy / --policy-param are refused beside it."""
    if args.policy_profile is None:
        return None
    from specdec_core.run.policy_profile import load_profile

    if config.policy != "lossless" or config.policy_params:
        raise SpecdecError("--policy-profile chooses the policy per prompt; drop --policy")
    profile = load_profile(args.policy_profile)
    check_policy(replace(config, policy=profile.policy, policy_params=dict(profile.params)))
    return profile


def add_adapt_options(parser: argparse.ArgumentParser) -> None:
    """`--adapt` and its settings (generate, bench): fine-tune the EAGLE head between runs."""
    parser.add_argument(
        "--adapt",
        action="store_true",
        help="adapt the EAGLE head to the runs: after each run (bench: each prompt) the "
        "target's features of its output train the head for --adapt-seconds, regularised "
        "toward the loaded head; output stays the target's (lossless)",
    )
    parser.add_argument(
        "--adapt-seconds", type=float, default=0.5, help="training time after each run"
    )
    parser.add_argument(
        "--adapt-tokens", type=int, default=4096, help="buffer of recent runs, in tokens"
    )
    parser.add_argument(
        "--save-adapted", default=None, metavar="DIR", help="save the adapted head to a new DIR"
    )


def adapt_settings(args: argparse.Namespace, methods: list[str]):
    """The `--adapt` settings, checked before a model loads (None without --adapt)."""
    from specdec_core.run.methods import get_method
    from specdec_core.training.adaptation import AdaptSettings

    if not args.adapt:
        if args.save_adapted:
            raise SpecdecError("--save-adapted saves what --adapt learned; add --adapt")
        return None
    if not any(get_method(m.partition(":")[0]).needs == "head" for m in methods):
        raise SpecdecError("--adapt adapts an EAGLE head; use eagle, eagle2 or eagle2-lookup")
    if args.adapt_seconds < 0 or args.adapt_tokens < 2:
        raise SpecdecError("--adapt-seconds must be >= 0 and --adapt-tokens at least 2")
    if args.save_adapted:
        from pathlib import Path

        out = Path(args.save_adapted)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise SpecdecError(f"--save-adapted {out}: exists and is not empty; give a new DIR")
    return AdaptSettings(cap_tokens=args.adapt_tokens)


def k_value(text: str) -> int | str:
    """`--k`: a draft length, or 'auto' (a short sweep picks it; `specdec_core.tuning.autotune`)."""
    try:
        return int_or_auto(text, "--k")
    except SpecdecError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def int_or_auto(text: str, name: str) -> int | str:
    """A flag's value that is a whole number or 'auto'; `name` names the flag in the error."""
    if text == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise SpecdecError(f"{name} must be an integer or 'auto' (got '{text}')") from None


def decode_config(args: argparse.Namespace, *, sweep: bool = False) -> DecodeConfig:
    """The decoding flags as a checked `DecodeConfig`. With `sweep`, the settings that are
    sweep axes keep their defaults here: every grid point overrides them."""
    fields: dict[str, Any] = {}
    if not sweep:
        k = DecodeConfig.k if args.k == AUTO else args.k  # auto: tuned once models are loaded
        if not math.isfinite(args.temperature) or args.temperature < 0:
            raise SpecdecError(f"--temperature must be a number >= 0 (got {args.temperature})")
        if not 0 <= k <= MAX_K:
            raise SpecdecError(f"--k must be between 0 and {MAX_K} (got {k}), or auto")
        tree_tokens = int_or_auto(args.tree_tokens, "--tree-tokens")
        fields = dict(
            k=k,
            temperature=args.temperature,
            tree_depth=args.tree_depth,
            tree_topk=args.tree_topk,
            tree_tokens=None if tree_tokens == AUTO else tree_tokens,
            k_schedule=args.k_schedule,
        )
    if args.max_new_tokens < 1:
        raise SpecdecError(f"--max-new-tokens must be at least 1 (got {args.max_new_tokens})")
    if not 0 < args.top_p <= 1:
        raise SpecdecError(f"--top-p must be in (0, 1] (got {args.top_p})")
    config = DecodeConfig(
        max_new_tokens=args.max_new_tokens,
        top_p=args.top_p,
        seed=args.seed,
        policy=args.policy,
        policy_params=parse_params(args.policy_param, "--policy-param"),
        method_params=parse_params(args.method_param, "--method-param"),
        ngram_max=args.ngram_max,
        **fields,
    )
    check_policy(config)
    return config


def check_policy(config: DecodeConfig) -> None:
    """Fail before any model loads: an unknown policy or parameter is bad input."""
    from specdec_core.verifiers import make_verifier

    make_verifier(config.policy, **config.policy_params)


def model_specs(args: argparse.Namespace) -> dict[str, str]:
    return {
        "draft": args.draft,
        "head": args.head,
        "medusa": args.medusa,
        "mtp": args.mtp,
        "speculator": args.speculator,
        "dflash": args.dflash,
    }


def sweep_axes(args: argparse.Namespace) -> dict[str, list[Any]]:
    """The grid a `sweep` was asked for: each axis flag given, plus `--policy-param-grid` and
    `--method-param-grid`."""
    axes: dict[str, list[Any]] = {}
    for dest, axis in SWEEP_AXES.items():
        text = getattr(args, dest)
        if text is not None:
            axes[axis.field] = [_grid_value(v, axis, dest) for v in text.split(",")]
    for dest, prefix in (
        ("policy_param_grid", "policy_params."),
        ("method_param_grid", "method_params."),
    ):
        for item in getattr(args, dest):
            name, _, values = item.partition("=")
            flag = "--" + dest.replace("_", "-")
            if not name.strip() or not values:
                raise SpecdecError(f"{flag} expects NAME=V1,V2,... (got '{item}')")
            number = Axis(name.strip(), float, None)
            axes[f"{prefix}{name.strip()}"] = [
                _grid_value(v, number, dest) for v in values.split(",")
            ]
    return axes


def _grid_value(text: str, axis: Axis, dest: str) -> Any:
    text, flag = text.strip(), "--" + dest.replace("_", "-")
    if axis.auto and text == AUTO:
        return None
    try:
        value = axis.cast(text)
    except ValueError:
        raise SpecdecError(f"{flag}: '{text}' is not a number") from None
    if axis.choices and value not in axis.choices:
        raise SpecdecError(f"{flag}: unknown '{value}'; use {', '.join(axis.choices)}")
    if axis.low is not None and value < axis.low:
        raise SpecdecError(f"{flag}: values must be >= {axis.low} (got {value})")
    return value


def resolve_auto_k(
    args: argparse.Namespace,
    config: DecodeConfig,
    target: LoadedModel,
    methods: list[str],
    extra: object | None = None,
) -> DecodeConfig:
    """With `--k auto`, tune k for the first speculative chain method (with its draft / head
    `extra` if already loaded), print the table on stderr and return `config` with the chosen
    k; otherwise return `config` unchanged."""
    if args.k != AUTO:
        return config
    from specdec_core.measurement.bench_entries import entry_method
    from specdec_core.run.methods import is_chain
    from specdec_core.tuning.autotune import tune_on_device

    chain = [m for m in dict.fromkeys(map(entry_method, methods)) if is_chain(m)]
    if not chain:
        raise SpecdecError("--k auto needs a speculative chain method (classic, eagle, ngram)")
    print(f"--k auto: tuning k for '{chain[0]}' on this device…", file=sys.stderr)
    tuned = tune_on_device(
        target, chain[0], config, model_specs(args), progress=progress_line, extra=extra
    )
    print(f"\n{tuned.format_table()}\nchosen {tuned.reason}", file=sys.stderr)
    if len(chain) > 1:
        print(f"(the same k is used for {', '.join(chain)})", file=sys.stderr)
    return replace(config, k=tuned.k)


def show(value: Any) -> str:
    """A grid value as written on the command line (None is 'auto')."""
    return AUTO if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def progress_line(progress: SweepProgress) -> None:
    """One line per measured sweep point on stderr: a bar, the point, its speedup, time left."""
    width = 20
    filled = round(width * progress.done / progress.total)
    point = " ".join(
        f"{k.removeprefix('policy_params.')}={show(v)}" for k, v in progress.point.items()
    )
    eta = f"{progress.eta_seconds / 60:.1f} min left" if progress.eta_seconds is not None else ""
    measured = progress.record
    print(
        f"[{'#' * filled}{'.' * (width - filled)}] {progress.done}/{progress.total} {point}: "
        f"{measured.speedup_vs_ar:.2f}x, tau {measured.mean_accept_length:.2f} | {eta}",
        file=sys.stderr,
        flush=True,
    )


def load_progress(quiet: bool = False):
    """Model-loading progress on stderr (None when `quiet`: the command prints JSON)."""
    if quiet:
        return None
    return lambda message, fraction: print(f"[{fraction:4.0%}] {message}", file=sys.stderr)


def load_target(
    args: argparse.Namespace, prompts: Sequence[str], quiet: bool = False
) -> LoadedModel:
    """The target of --target, --device and --dtype, placed as `load_options` says (its memory
    check sized for `prompts`), its loading progress on stderr unless `quiet`."""
    from specdec_core.models.loading import load_model

    options = load_options(args, prompts)
    return load_model(args.target, args.device, args.dtype, load_progress(quiet), options=options)


def _policies() -> str:
    from specdec_core.verifiers import describe_policies

    return describe_policies().replace("%", "%%")

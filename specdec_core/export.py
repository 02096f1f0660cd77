"""`specdec export`: carry a tuned setting to a serving engine (vLLM or SGLang).

vLLM takes one JSON object, `--speculative-config '{...}'`; SGLang takes command-line flags.
Only the speculative part is exported: temperature and top-p are per-request sampling
parameters in both engines (send them with each request), and a lossy policy has no
equivalent there (both verify losslessly by default), which the notes say.

Mapping (playground -> vLLM `speculative_config` key | SGLang flag):

- classic          -> method "draft_model", model = draft   | --speculative-algorithm STANDALONE
- eagle            -> method "eagle" ("eagle3" for an EAGLE-3 head)
                                                            | --speculative-algorithm EAGLE (EAGLE3)
- eagle2 (tree)    -> method "eagle"/"eagle3", a chain      | --speculative-algorithm EAGLE (EAGLE3)
- ngram            -> method "ngram"                        | --speculative-algorithm NGRAM
- --draft / --head -> model                                 | --speculative-draft-model-path
- an EAGLE-1 head's token map (`--head-out`, specdec_core/head_export.py)
                   -> (none: vLLM cannot carry it)          | --speculative-token-map FILE
- k (chain)        -> num_speculative_tokens = k            | --speculative-num-steps k,
                      --speculative-eagle-topk 1, --speculative-num-draft-tokens k+1
- tree depth / top-k / tokens -> num_speculative_tokens = depth
                                  | --speculative-num-steps, --speculative-eagle-topk,
                                    --speculative-num-draft-tokens (root included, as here)
- --ngram-max      -> prompt_lookup_max (prompt_lookup_min 1)
                      | --speculative-ngram-max-match-window-size (min 1),
                        --speculative-ngram-max-bfs-breadth 1 (a chain, like our drafter),
                        --speculative-num-draft-tokens k+1

Units: a tree's depth is its longest draft path (levels), as SGLang's `num_steps` (a chain of
k drafts is k steps); tree tokens count the root, as SGLang's `num_draft_tokens` and EAGLE's
`total_token`.

Sources: vLLM `vllm/config/speculative.py` (`SpeculativeConfig`: `method` in "ngram",
"draft_model", "eagle", "eagle3", …; `model`; `num_speculative_tokens`; `prompt_lookup_max`,
`prompt_lookup_min`) and docs/features/speculative_decoding/{eagle,draft_model,n_gram}.md.
SGLang docs/advanced_features/speculative_decoding.md ("Full Parameter Reference": algorithms
EAGLE, EAGLE3, STANDALONE, NGRAM; `--speculative-num-draft-tokens` counts the verified root,
"if topk=1, it is adjusted to num_steps + 1"; all three tree flags are set together or left
unset for SGLang's own auto choice; NGRAM's `--speculative-ngram-*` window and BFS flags).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

from safetensors import safe_open

from specdec_core.config import DecodeConfig
from specdec_core.eagle.layouts import TOKEN_MAP, layout_of
from specdec_core.errors import SpecdecError
from specdec_core.method_kinds import is_tree
from specdec_core.resources import bundled_head, names_bundled_head, resource_path
from specdec_core.sweep_records import read_sweep

ENGINES = ("vllm", "sglang")
EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the embedded target's original repo
BUNDLED = {"head": "head", "draft": "draft"}  # `embedded` head / draft under resources/

# playground method -> (what it needs, vLLM method, SGLang algorithm); EAGLE-3 heads upgrade
# eagle -> eagle3 / EAGLE -> EAGLE3.
METHOD_MAP: dict[str, tuple[str | None, str, str]] = {
    "classic": ("draft", "draft_model", "STANDALONE"),
    "eagle": ("head", "eagle", "EAGLE"),
    "eagle2": ("head", "eagle", "EAGLE"),
    "ngram": (None, "ngram", "NGRAM"),
    # the nearest serving equivalent: the same head and tree, without the merged branch
    "eagle2-lookup": ("head", "eagle", "EAGLE"),
    "eagle2-suffix": ("head", "eagle", "EAGLE"),
}
NEAREST = {  # methods exported as their nearest equivalent, and what does not carry over
    "eagle2-lookup": "the prompt-lookup branch merged into the EAGLE-2 tree",
    "eagle2-suffix": "the suffix-decoding branch merged into the EAGLE-2 tree",
}


@dataclass(frozen=True)
class Export:
    engine: str
    payload: str  # what to paste: the JSON (vLLM) or the flags (SGLang)
    command: str  # a full example server command
    notes: list[str] = field(default_factory=list)


def export(
    engine: str, method: str, config: DecodeConfig, target: str = "embedded", model: str = ""
) -> Export:
    """The engine's speculative settings for `method` at `config`; `model` is the draft or head
    spec (`embedded` = the bundled one). Raises `SpecdecError` for what cannot be exported."""
    if engine not in ENGINES:
        raise SpecdecError(f"unknown engine '{engine}'; choose one of: {', '.join(ENGINES)}")
    if method not in METHOD_MAP:
        raise SpecdecError(
            f"method '{method}' has no serving-engine equivalent; export one of: "
            f"{', '.join(METHOD_MAP)}"
        )
    needs, vllm_method, sglang_algorithm = METHOD_MAP[method]
    notes: list[str] = []
    if method in NEAREST:
        notes.append(
            f"{method} is exported as its nearest equivalent, EAGLE with the same head and tree: "
            f"{NEAREST[method]} has no equivalent in {engine}, so expect a τ below the "
            "playground's where answers repeat their context (summaries, code, arithmetic)"
        )
    path = _resolve(needs, model or "embedded", notes) if needs else None
    token_map = _token_map(path) if needs == "head" else None
    if needs == "head" and head_format(path) == "eagle3":
        vllm_method, sglang_algorithm = "eagle3", "EAGLE3"
        token_map = None  # SGLang ignores a token map for EAGLE-3 (the head has d2t)
    elif needs == "head" and _has_draft_vocab(path):
        notes.append(
            "this EAGLE-1 layout head drafts over a reduced vocabulary (d2t / t2d), which "
            "SGLang's EAGLE-1 loader ignores (it would draft over the full vocabulary): "
            "--head-out DIR writes the head with the token map SGLang takes instead"
            if engine == "sglang"
            else "this EAGLE-1 layout head drafts over a reduced vocabulary (d2t / t2d), which "
            "vLLM's EAGLE-1 loader cannot carry (d2t / t2d in the file fail its load): serve it "
            "with --engine sglang --head-out DIR, or train an EAGLE-3 head, which vLLM loads "
            "(specdec train eagle --arch eagle3)"
        )
    elif token_map is not None and engine == "vllm":
        notes.append(
            f"this EAGLE-1 head's reduced vocabulary is SGLang's token map {token_map}, which "
            "vLLM does not read (it drafts over the full vocabulary): write the head for vLLM "
            "with --head-out DIR"
        )
    steps, topk, tokens = _shape(method, config, notes)
    target_id = _target(target, notes)
    if config.policy != "lossless":
        notes.append(
            f"policy '{config.policy}' is lossy and has no equivalent in {engine}: the engine "
            "verifies losslessly, so expect a lower τ and the target's exact output"
        )
    notes.append("temperature / top-p are per-request sampling parameters: send them with requests")
    if engine == "vllm":
        spec = {"method": vllm_method, "num_speculative_tokens": steps}
        if path is not None:
            spec["model"] = path
        if method == "ngram":
            spec.update(prompt_lookup_max=config.ngram_max, prompt_lookup_min=1)
        if is_tree(method):
            notes.append(
                "vLLM's EAGLE proposer drafts a chain: the tree's depth becomes "
                "num_speculative_tokens; top-k and tree size do not carry over"
            )
        payload = json.dumps(spec)
        command = f"vllm serve {shlex.quote(target_id)} --speculative-config {shlex.quote(payload)}"
        return Export(engine, payload, command, notes)
    flags = ["--speculative-algorithm", sglang_algorithm]
    if path is not None:
        flags += ["--speculative-draft-model-path", path]
    if token_map is not None:  # the head's reduced vocabulary (specdec_core/head_export.py)
        flags += ["--speculative-token-map", token_map]
    if method == "ngram":
        flags += [
            "--speculative-num-draft-tokens", str(steps + 1),
            "--speculative-ngram-min-match-window-size", "1",
            "--speculative-ngram-max-match-window-size", str(config.ngram_max),
            "--speculative-ngram-max-bfs-breadth", "1",
        ]  # fmt: skip
        notes.append("SGLang's NGRAM speculation runs on CUDA only")
    elif steps is not None:
        flags += [
            "--speculative-num-steps", str(steps),
            "--speculative-eagle-topk", str(topk),
            "--speculative-num-draft-tokens", str(tokens),
        ]  # fmt: skip
    payload = shlex.join(flags)
    command = f"python -m sglang.launch_server --model-path {shlex.quote(target_id)} {payload}"
    return Export(engine, payload, command, notes)


@dataclass(frozen=True)
class SweepChoice:
    """The best point of a `specdec sweep` result, ready for `export`."""

    method: str
    config: DecodeConfig
    target: str
    model: str  # the draft or head spec the sweep used
    note: str


def best_of_sweep(path: str | Path, temperature: float | None = None) -> SweepChoice:
    """The fastest point of a sweep JSON (at `temperature`, if given) as an export input."""
    result = read_sweep(path, "pass the JSON file `specdec sweep --json-out` wrote")
    header = result.header
    best = result.best(None if temperature is None else float(temperature))
    if best is None:
        measured = ", ".join(str(t) for t in result.best_by_temperature()) or "none"
        raise SpecdecError(f"{path} has no point at temperature {temperature} (has: {measured})")
    config = best.config
    if best.aggregate.tree:  # the tree a tree method actually used: "tokens/depth/top-k"
        tokens, depth, topk = (int(v) for v in best.aggregate.tree.split("/"))
        config = replace(config, tree_tokens=tokens, tree_depth=depth, tree_topk=topk)
    needs = METHOD_MAP.get(header["method"], (None,))[0]
    model = header.get("specs", {}).get(needs or "", "embedded")
    point = ", ".join(f"{k}={v}" for k, v in best.point.items())
    note = (
        f"from {path}: the best point ({point}) ran {best.speedup_vs_ar:.2f}x vs ar "
        f"(τ {best.mean_accept_length:.2f}) on {header.get('device', '?')}"
    )
    return SweepChoice(header["method"], config, header.get("target", "embedded"), model, note)


def _shape(method: str, config: DecodeConfig, notes: list[str]) -> tuple:
    """(steps, top-k, draft tokens incl. the root); all None = let the engine choose."""
    if not is_tree(method):
        if config.k < 1:
            raise SpecdecError(f"--k must be at least 1 to export (got {config.k})")
        return config.k, 1, config.k + 1
    given = (config.tree_depth, config.tree_topk, config.tree_tokens)
    if all(v is None for v in given):
        notes.append(
            "tree size is 'auto' here: the engine picks its own tree (SGLang's auto choice); "
            "pass --tree-depth, --tree-topk and --tree-tokens to export a tuned tree"
        )
        return None, None, None
    if any(v is None for v in given):
        raise SpecdecError(
            "give all three of --tree-depth, --tree-topk and --tree-tokens "
            "(SGLang takes the tree's steps, top-k and draft tokens together), or none"
        )
    return given


def head_format(path: str | None) -> str:
    """'eagle3' for an EAGLE-3 head (a `midlayer`; docs/architecture.md#eagle-heads), else
    'eagle' (EAGLE-1/2)."""
    if path is None or not Path(path, "config.json").is_file():
        return "eagle"  # a hub id: cannot look inside offline; EAGLE-1/2 is the default
    config = json.loads(Path(path, "config.json").read_text())
    if any("Eagle3" in arch for arch in config.get("architectures") or []):
        return "eagle3"
    keys = _weight_keys(path)
    if not keys:
        return "eagle"
    layout = layout_of(keys)  # the layout rule, from the weight names (no torch)
    if layout is None:
        raise SpecdecError(
            "this is not an EAGLE head: expected keys 'layers.0.*' (EAGLE-1/2) or 'midlayer.*' "
            f"(EAGLE-3), found e.g. {', '.join(sorted(keys)[:4])}"
        )
    return "eagle3" if layout == "eagle3" else "eagle"


def _weight_keys(path: str | None) -> list[str]:
    """Tensor names of a local head directory (safetensors headers only, read without torch;
    [] otherwise)."""
    if path is None or not Path(path).is_dir():
        return []
    keys: list[str] = []
    for weights in sorted(Path(path).glob("*.safetensors")):
        with safe_open(str(weights), framework="np") as handle:
            keys.extend(handle.keys())
    return keys


def _has_draft_vocab(path: str | None) -> bool:
    return "d2t" in _weight_keys(path)


def _token_map(path: str | None) -> str | None:
    """SGLang's token-map file in a local head directory (an EAGLE-1 head exported for it)."""
    if path is None or not Path(path, TOKEN_MAP).is_file():
        return None
    return str(Path(path, TOKEN_MAP))


def _resolve(needs: str, spec: str, notes: list[str]) -> str:
    if spec == "smollm2":  # the embedded target itself, e.g. as its own draft
        return EMBEDDED_HUB_ID
    if needs == "head" and names_bundled_head(spec):
        bundled = bundled_head(spec)
    elif spec != "embedded":
        local = Path(spec).expanduser()
        return str(local.resolve()) if local.exists() else spec
    else:
        bundled = resource_path(BUNDLED[needs])
        if not (bundled / "config.json").is_file():
            raise SpecdecError(
                f"this install has no bundled {needs}; pass --{needs} with a directory or hub id"
            )
    notes.append(
        f"the bundled EAGLE head is the local directory {bundled}; --head-out DIR writes it as "
        "the engine loads it as it stands (copy DIR to the server)"
        if needs == "head"
        else f"the bundled draft model is the local directory {bundled} (a LlamaForCausalLM): "
        "copy it to the server"
    )
    return str(bundled)


def _target(spec: str, notes: list[str]) -> str:
    if spec in ("embedded", "smollm2"):
        notes.append(
            f"the embedded target is {EMBEDDED_HUB_ID} (served from its original checkpoint, "
            "not the GGUF)"
        )
        return EMBEDDED_HUB_ID
    if spec.endswith(".gguf"):
        notes.append("vLLM / SGLang speculation wants the original checkpoint, not a .gguf")
    return spec

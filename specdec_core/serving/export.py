"""`specdec export`: carry a tuned setting to a serving engine (vLLM or SGLang).

vLLM takes one JSON object, `--speculative-config '{...}'`; SGLang takes command-line flags.
Only the speculative part is exported: temperature and top-p are per-request sampling
parameters in both engines (send them with each request), and a lossy policy has no
equivalent there (both verify losslessly by default), which the notes say.

Mapping (playground -> vLLM `speculative_config` key | SGLang flag):

- classic          -> method "draft_model", model = draft   | --speculative-algorithm STANDALONE
  with a draft of another tokenizer (read from tokenizer.json / config.json where they are
  on this machine): + "use_heterogeneous_vocab": true (vLLM's token-level intersection)
                                                            | none (the vocabulary must match)
- eagle            -> method "eagle" ("eagle3" for an EAGLE-3 head)
                                                            | --speculative-algorithm EAGLE (EAGLE3)
- eagle2 (tree)    -> method "eagle"/"eagle3", a chain      | --speculative-algorithm EAGLE (EAGLE3)
- peagle           -> method "eagle3", "parallel_drafting": true, model = the head in
                      speculators' peagle layout (--head-out writes it) | none (refused)
- dflash           -> method "dflash", model = the drafter, num_speculative_tokens = block − 1
                      | --speculative-algorithm DFLASH, --speculative-dflash-block-size block
- ddtree           -> the same DFlash chain in both (vLLM has no DDTree; SGLang's DDTREE worker
                      is in no server argument read): the node budget does not carry over
- ngram            -> method "ngram"                        | --speculative-algorithm NGRAM
- pard             -> method "draft_model", parallel_drafting true, model = the PARD draft
                      (its config.json must name the mask token) | none (no parallel draft)
- medusa (tree)    -> method "medusa", a chain of the first k heads' top-1 tokens | none
- mlp-speculator   -> method "mlp_speculator" (vLLM's V0 engine only)            | none
- mtp, mtp-tree    -> method "mtp" (the target's own checkpoint; a chain)
                                                            | --speculative-algorithm NEXTN
- lookahead, layer-skip, swift -> none in either engine (the refusal names the nearest)
- --draft / --head / --medusa / --speculator -> model       | --speculative-draft-model-path
- --mtp (another copy of the target) -> model               | --speculative-draft-model-path
- an EAGLE-1 head's token map (`--head-out`, specdec_core/serving/head_export.py)
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

Sources (the lines each rule and refusal rests on; docs/serving.md has the table):
- vLLM `vllm/config/speculative.py`: `SpeculativeMethod` ("ngram", "medusa", "mlp_speculator",
  "draft_model", "suffix", "eagle", "eagle3", the MTP model types, …); an MTP model type other
  than "mtp" "is deprecated and replaced with mtp"; method "mtp" without a model drafts from
  the target's own checkpoint, `hf_config_override` maps DeepSeek-V3 / GLM-4.5 / Qwen3-Next /
  Qwen3.5 / MiMo configs to their MTP models; `num_speculative_tokens` is required unless the
  draft config has `n_predict`; `verify_equal_vocab_size_if_draft_model` ("Target and draft
  model should have the same vocabulary size") unless `use_heterogeneous_vocab` (draft_model
  only, greedy draft sampling only; vLLM PR #38174). `vllm/transformers_utils/configs/
  medusa.py`: `num_lookahead_tokens` sets `num_heads`, so vLLM builds num_speculative_tokens
  heads; `vllm/model_executor/models/medusa.py` reads `blocks.*` / `lm_heads.*` /
  `token_map` (a `medusa_heads.` prefix dropped) and no other names; `vllm/v1/spec_decode/
  medusa.py` drafts each head's argmax, a chain. `vllm/model_executor/models/registry.py`
  lists `MLPSpeculatorPreTrainedModel` commented out ("Re-enable this once the MLP Speculator
  is supported in V1") and the V1 GPU model runner has no MLP-speculator branch ("Unknown
  speculative decoding method", vllm issue #47825).
- SGLang `python/sglang/srt/speculative/spec_info.py` (`SpeculativeAlgorithm`: EAGLE, EAGLE3,
  NEXTN, STANDALONE, NGRAM, …: no Medusa, MLP speculator, Jacobi lookahead or layer skipping);
  `server_args.py` ("if self.speculative_algorithm == 'NEXTN': self.speculative_algorithm =
  'EAGLE'"); `python/sglang/srt/configs/model_config.py` `_config_draft_model` (the target
  architectures whose MTP layer it drafts with: DeepseekV3ForCausalLM ->
  DeepseekV3ForCausalLMNextN, Glm4MoeForCausalLM -> Glm4MoeForCausalLMNextN,
  Qwen3NextForCausalLM -> Qwen3NextForCausalLMMTP, Qwen3_5(Moe)ForConditionalGeneration ->
  Qwen3_5ForCausalLMMTP, MiMoForCausalLM -> MiMoMTP); STANDALONE validates that the draft's
  vocabulary is the target's (sgl-project/sglang#23838); NGRAM was renamed from Ant Group's
  trie-based "lookahead" (sgl-project/sglang#11010), not Jacobi lookahead decoding. SGLang
  docs/advanced_features/speculative_decoding.md ("Full Parameter Reference":
  `--speculative-num-draft-tokens` counts the verified root, "if topk=1, it is adjusted to
  num_steps + 1"; all three tree flags are set together or left unset for SGLang's own auto
  choice; NGRAM's `--speculative-ngram-*` window and BFS flags).
- transformers `GenerationConfig.assistant_early_exit` (LayerSkip's early exit as the
  assistant): the nearest serving of a layer-skip draft.
- DFlash, vLLM 0.32 (`vllm/config/speculative.py`): "dflash" is a `SpeculativeMethod`
  (`DFlashModelTypes`); a model path containing "dflash" is detected as it too; the draft config
  is wrapped in `EAGLEConfig(method="dflash")`, which names the architecture `DFlash{arch}`
  unless it already starts or ends with DFlash (`transformers_utils/configs/eagle.py`), and
  `parallel_drafting` is set; `num_speculative_tokens` is required ("A speculative model was
  provided, but `num_speculative_tokens` was not provided") and not checked against the
  drafter's block_size (only DSpark's is); `max_num_new_slots_for_drafting`: "DFlash uses one
  bonus query followed by K mask queries", and `v1/spec_decode/dflash.py` runs
  `num_query_per_req = 1 + self.num_speculative_tokens`: a block of K + 1 rows, so K =
  block − 1. `model_executor/models/registry.py` maps `DFlashDraftModel` to
  `qwen3_dflash.DFlashQwen3ForCausalLM` whatever the target: a Llama target serves a Qwen3
  drafter, its hidden states captured through `SupportsEagle3`, which `LlamaForCausalLM`
  implements (`gpu_model_runner._setup_eagle3_aux_hidden_state_outputs` refuses a target
  without it: "Model does not support EAGLE3 interface"). Target layers:
  `v1/worker/gpu/spec_decode/eagle/eagle3_utils.py` reads `dflash_config.target_layer_ids` + 1
  (HF's `hidden_states` index, as formats.py). The mask token:
  `llm_base_proposer._init_parallel_drafting_params` reads `dflash_config.mask_token_id`, else
  `mask_token_id`, else refuses. A reduced draft vocabulary: `DFlashQwen3ForCausalLM` sets
  `draft_vocab_size` to `vocab_size` when absent, else builds its own `lm_head` over it and
  maps ids through `d2t` (`draft_id_to_target_id`); `load_weights` skips `t2d`. The
  speculators layout (`speculators_model_type` "dflash") is converted by
  `transformers_utils/configs/speculators/algos.py` `update_dflash`.
- DFlash, SGLang: `python/sglang/srt/arg_groups/fields/spec.py` (builtins EAGLE, EAGLE3,
  NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK, UNO; `--speculative-dflash-block-size`, "DFLASH
  only. Block size (verify window length). Alias of --speculative-num-draft-tokens");
  `arg_groups/speculative_hook.py` `_handle_dflash` (requires
  --speculative-draft-model-path, forces num_steps and eagle_topk to 1, infers the block from
  the draft's config when not given); `speculative/dflash_utils.py`
  `parse_dflash_draft_config` reads z-lab's config (`dflash_config`, `block_size`) only;
  `speculative/dflash_worker.py` takes only GPU draft attention backends (flashinfer, fa3,
  fa4, triton, ascend). `speculative/ddtree_worker.py` (a `DDTreeWorker` reading
  `server_args.speculative_ddtree_budget`, default block_size − 1) exists in the repository,
  but the server arguments read name no DDTREE algorithm nor a budget flag.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

from safetensors import safe_open

from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.layouts import TOKEN_MAP, is_peagle, layout_of
from specdec_core.heads.mtp.layouts import stated_count
from specdec_core.heads.pard import PARD_TOKEN, stated_mask_token
from specdec_core.measurement.sweep_records import read_sweep
from specdec_core.resources import bundled_head, names_bundled_head, resource_path
from specdec_core.run.method_kinds import is_tree

ENGINES = ("vllm", "sglang")
EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the embedded target's original repo
EMBEDDED = ("embedded", "smollm2")  # the embedded target's names
# `embedded` extra models under resources/, by the model option that names them
BUNDLED = {"head": "head", "draft": "draft", "medusa": "medusa", "speculator": "mlp-speculator"}
WHAT = {"medusa": "Medusa heads", "speculator": "MLP speculator"}
MEDUSA_FASTERDECODING = ("medusa_lm_head.safetensors", "medusa_lm_head.pt")  # medusa/formats.py

VLLM_METHODS = (
    "vLLM's speculative methods (vllm/config/speculative.py SpeculativeMethod: ngram, medusa, "
    "mlp_speculator, draft_model, suffix, eagle, eagle3, mtp, ...)"
)
SGLANG_ALGORITHMS = (
    "SGLang's --speculative-algorithm (python/sglang/srt/speculative/spec_info.py "
    "SpeculativeAlgorithm: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, ...)"
)
EARLY_EXIT = (
    "the nearest serving of an early-exit draft is transformers' generate(assistant_early_exit="
    "E) on a LayerSkip checkpoint"
)


@dataclass(frozen=True)
class Serving:
    """How the engines serve a playground method: the model option it reads (`needs`: draft,
    head, medusa, speculator, mtp or None), vLLM's `speculative_config` method and SGLang's
    `--speculative-algorithm`; None where that engine has no equivalent, and `no_vllm` /
    `no_sglang` then say why, with the source line that decides it (one line each)."""

    needs: str | None
    vllm: str | None
    sglang: str | None
    no_vllm: str = ""
    no_sglang: str = ""
    nearest: str = ""  # exported as its nearest equivalent: what does not carry over

    def refusal(self, engine: str) -> str | None:
        """Why `engine` cannot serve the method (None: it can)."""
        if engine == "vllm":
            return None if self.vllm else self.no_vllm
        return None if self.sglang else self.no_sglang


_EAGLE = Serving("head", "eagle", "EAGLE")  # EAGLE-3 heads upgrade to eagle3 / EAGLE3
SERVING: dict[str, Serving] = {
    "classic": Serving("draft", "draft_model", "STANDALONE"),
    "eagle": _EAGLE,
    "eagle2": _EAGLE,
    # the nearest serving equivalent: the same head and tree, without the merged branch
    "eagle2-lookup": replace(
        _EAGLE, nearest="the prompt-lookup branch merged into the EAGLE-2 tree"
    ),
    "eagle2-suffix": replace(
        _EAGLE, nearest="the suffix-decoding branch merged into the EAGLE-2 tree"
    ),
    "peagle": Serving(
        "head",
        "eagle3",
        None,
        no_sglang="SGLang has no parallel drafting for EAGLE-3 heads in the versions read "
        f"({SGLANG_ALGORITHMS}; its llama_eagle3.py ignores weights it does not know, so "
        "mask_hidden would be dropped and the head run as a chain); newer SGLang is unchecked: "
        "serve it with --engine vllm",
    ),
    "ngram": Serving(None, "ngram", "NGRAM"),
    "dflash": Serving("dflash", "dflash", "DFLASH"),
    # the nearest serving equivalent: the same drafter's chain, without the tree
    "ddtree": Serving("dflash", "dflash", "DFLASH", nearest="DDTree's best-first tree"),
    "pard": Serving(
        "draft",
        "draft_model",
        None,
        no_sglang="SGLang has no parallel draft model: its built-in algorithms "
        "(python/sglang/srt/speculative/spec_registry.py _RESERVED_NAMES: DFLASH, EAGLE, EAGLE3, "
        "NEXTN, STANDALONE, NGRAM) draft no mask tokens; the nearest is STANDALONE, the same "
        "draft run once per drafted token: export --method classic with it, or serve PARD with "
        "--engine vllm",
    ),
    "medusa": Serving(
        "medusa",
        "medusa",
        None,
        no_sglang=f"SGLang serves no Medusa heads: {SGLANG_ALGORITHMS} has no Medusa "
        "algorithm; serve them with --engine vllm",
    ),
    "mlp-speculator": Serving(
        "speculator",
        "mlp_speculator",
        None,
        no_sglang=f"SGLang serves no MLP speculator: {SGLANG_ALGORITHMS} has no MLP "
        "speculator algorithm; serve it with --engine vllm",
    ),
    "mtp": Serving("mtp", "mtp", "NEXTN"),
    "mtp-tree": Serving("mtp", "mtp", "NEXTN"),
    "lookahead": Serving(
        None,
        None,
        None,
        no_vllm=f"vLLM has no lookahead decoding: {VLLM_METHODS} have no Jacobi window; the "
        "nearest is its n-gram drafting, which proposes what followed the context's last "
        "n-gram as lookahead's verification branch does: export --method ngram",
        no_sglang=f"SGLang has no lookahead decoding: {SGLANG_ALGORITHMS} has no Jacobi window "
        "(NGRAM, renamed from Ant Group's trie-based 'lookahead' in sgl-project/sglang#11010, "
        "drafts n-grams of the context); the nearest is NGRAM, as lookahead's verification "
        "branch: export --method ngram",
    ),
    "layer-skip": Serving(
        None,
        None,
        None,
        no_vllm=f"vLLM has no self-speculative layer skipping: {VLLM_METHODS} draft with "
        f"another model, a head or n-grams; {EARLY_EXIT}",
        no_sglang=f"SGLang has no self-speculative layer skipping: {SGLANG_ALGORITHMS} drafts "
        f"with another model, a head or n-grams; {EARLY_EXIT}",
    ),
    "swift": Serving(
        None,
        None,
        None,
        no_vllm=f"vLLM has no self-speculative layer skipping or layer-set search (SWIFT): "
        f"{VLLM_METHODS} draft with another model, a head or n-grams; {EARLY_EXIT}, with a "
        "fixed exit layer",
        no_sglang=f"SGLang has no self-speculative layer skipping or layer-set search (SWIFT): "
        f"{SGLANG_ALGORITHMS} drafts with another model, a head or n-grams; {EARLY_EXIT}, with "
        "a fixed exit layer",
    ),
}
# method -> (what it needs, vLLM method, SGLang algorithm): SERVING as tuples, for callers that
# only look up the model option a method reads
METHOD_MAP: dict[str, tuple[str | None, str | None, str | None]] = {
    name: (serving.needs, serving.vllm, serving.sglang) for name, serving in SERVING.items()
}


@dataclass(frozen=True)
class MtpTarget:
    """A model family whose native MTP layer both the playground (docs/mtp.md) and the engines
    draft with, as the engines recognise its config.json."""

    family: str
    architectures: tuple[str, ...]  # config.json `architectures[0]`
    model_types: tuple[str, ...]  # config.json `model_type`
    vllm_model_type: str  # vLLM's MTP model type (hf_config_override); older releases' method
    sglang_architectures: tuple[str, ...]  # the targets SGLang's _config_draft_model maps
    sglang_draft: str  # ... to this draft architecture


MTP_TARGETS = (
    MtpTarget(
        "DeepSeek-V3",
        ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM"),
        ("deepseek_v3", "deepseek_v32"),
        "deepseek_mtp",
        ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM"),
        "DeepseekV3ForCausalLMNextN",
    ),
    MtpTarget(
        "GLM-4.5",
        ("Glm4MoeForCausalLM",),
        ("glm4_moe",),
        "glm4_moe_mtp",
        ("Glm4MoeForCausalLM",),
        "Glm4MoeForCausalLMNextN",
    ),
    MtpTarget(
        "Qwen3-Next",
        ("Qwen3NextForCausalLM",),
        ("qwen3_next",),
        "qwen3_next_mtp",
        ("Qwen3NextForCausalLM",),
        "Qwen3NextForCausalLMMTP",
    ),
    MtpTarget(
        "Qwen3.5",
        (
            "Qwen3_5ForConditionalGeneration",
            "Qwen3_5MoeForConditionalGeneration",
            "Qwen3_5ForCausalLM",
            "Qwen3_5MoeForCausalLM",
        ),
        ("qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"),
        "qwen3_5_mtp",
        ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"),
        "Qwen3_5ForCausalLMMTP",
    ),
    MtpTarget("MiMo", ("MiMoForCausalLM",), ("mimo",), "mimo_mtp", ("MiMoForCausalLM",), "MiMoMTP"),
)
MTP_FAMILIES = ", ".join(target.family for target in MTP_TARGETS)


@dataclass(frozen=True)
class Export:
    engine: str
    payload: str  # what to paste: the JSON (vLLM) or the flags (SGLang)
    command: str  # a full example server command
    notes: list[str] = field(default_factory=list)


def serving(engine: str, method: str) -> Serving:
    """How `engine` serves `method`; a SpecdecError of one line when it cannot."""
    if engine not in ENGINES:
        raise SpecdecError(f"unknown engine '{engine}'; choose one of: {', '.join(ENGINES)}")
    found = SERVING.get(method)
    if found is None:
        servable = [name for name, entry in SERVING.items() if entry.vllm or entry.sglang]
        raise SpecdecError(
            f"method '{method}' has no serving-engine equivalent; export one of: "
            f"{', '.join(servable)}"
        )
    refusal = found.refusal(engine)
    if refusal is not None:
        raise SpecdecError(refusal)
    return found


def export(
    engine: str, method: str, config: DecodeConfig, target: str = "embedded", model: str = ""
) -> Export:
    """The engine's speculative settings for `method` at `config`; `model` is the spec of the
    model the method reads (`SERVING[method].needs`: draft, head, Medusa heads, MLP speculator
    or MTP checkpoint; `embedded` = the bundled one, for MTP the target's own). Raises
    `SpecdecError` (one line) for what the engine cannot serve."""
    entry = serving(engine, method)
    if entry.needs == "medusa":
        return _medusa(config, target, model or "embedded")
    if entry.needs == "speculator":
        return _speculator(config, target, model or "embedded")
    if entry.needs == "mtp":
        return _mtp(engine, method, config, target, model or "embedded")
    if method == "pard":
        return _pard(config, target, model or "embedded")
    if entry.needs == "dflash":
        return _dflash(engine, method, config, target, model or "embedded")
    vllm_method, sglang_algorithm = entry.vllm, entry.sglang
    needs = entry.needs
    notes: list[str] = []
    if entry.nearest:
        notes.append(
            f"{method} is exported as its nearest equivalent, EAGLE with the same head and tree: "
            f"{entry.nearest} has no equivalent in {engine}, so expect a τ below the "
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
    if method == "peagle":
        notes += _peagle_notes(path)
    other_vocabulary = needs == "draft" and _same_vocabulary(target, model or "embedded") is False
    if other_vocabulary and engine == "sglang":
        raise SpecdecError(
            "SGLang cannot serve a draft with another tokenizer: STANDALONE drafts token ids "
            "that the target reads in its own vocabulary and refuses a draft of another "
            "vocabulary at start (sgl-project/sglang#23838); serve it with --engine vllm "
            "(token-level intersection) or use a draft with the target's tokenizer"
        )
    steps, topk, tokens = _shape(method, config, notes)
    target_id = _target(target, notes)
    if engine == "vllm":
        spec: dict = {"method": vllm_method, "num_speculative_tokens": steps}
        if path is not None:
            spec["model"] = path
        if method == "ngram":
            spec.update(prompt_lookup_max=config.ngram_max, prompt_lookup_min=1)
        if method == "peagle":  # vLLM's reading of speculators' peagle (configs/speculators)
            spec["parallel_drafting"] = True
        if other_vocabulary:
            spec["use_heterogeneous_vocab"] = True
            notes.append(_HETEROGENEOUS)
        if is_tree(method):
            notes.append(
                "vLLM's EAGLE proposer drafts a chain: the tree's depth becomes "
                "num_speculative_tokens; top-k and tree size do not carry over"
            )
        return _vllm(spec, target_id, config, notes)
    flags = ["--speculative-algorithm", sglang_algorithm]
    if path is not None:
        flags += ["--speculative-draft-model-path", path]
    if token_map is not None:  # the head's reduced vocabulary (specdec_core/serving/head_export.py)
        flags += ["--speculative-token-map", token_map]
    if method == "ngram":
        flags += [
            "--speculative-num-draft-tokens", str(steps + 1),
            "--speculative-ngram-min-match-window-size", "1",
            "--speculative-ngram-max-match-window-size", str(config.ngram_max),
            "--speculative-ngram-max-bfs-breadth", "1",
        ]  # fmt: skip
        notes.append("SGLang's NGRAM speculation runs on CUDA only")
    else:
        flags += _tree_flags(steps, topk, tokens)
    return _sglang(flags, target_id, config, notes)


_HETEROGENEOUS = (
    "the draft's tokenizer is not the target's: vLLM drafts over the tokens both vocabularies "
    "share (use_heterogeneous_vocab, its token-level intersection; greedy draft sampling only), "
    "as the playground does at T > 0, where at T = 0 it drafts over the draft's whole "
    "vocabulary (universal assisted generation); a vLLM without use_heterogeneous_vocab "
    "(before PR #38174) refuses a draft of another vocabulary size ('Target and draft model "
    "should have the same vocabulary size')"
)


def _vllm(spec: dict, target_id: str, config: DecodeConfig, notes: list[str]) -> Export:
    notes += _sampling_notes("vllm", config)
    payload = json.dumps(spec)
    command = f"vllm serve {shlex.quote(target_id)} --speculative-config {shlex.quote(payload)}"
    return Export("vllm", payload, command, notes)


def _sglang(flags: list[str], target_id: str, config: DecodeConfig, notes: list[str]) -> Export:
    notes += _sampling_notes("sglang", config)
    payload = shlex.join(flags)
    command = f"python -m sglang.launch_server --model-path {shlex.quote(target_id)} {payload}"
    return Export("sglang", payload, command, notes)


def _sampling_notes(engine: str, config: DecodeConfig) -> list[str]:
    notes = []
    if config.policy != "lossless":
        notes.append(
            f"policy '{config.policy}' is lossy and has no equivalent in {engine}: the engine "
            "verifies losslessly, so expect a lower τ and the target's exact output"
        )
    notes.append("temperature / top-p are per-request sampling parameters: send them with requests")
    return notes


def _tree_flags(steps: int | None, topk: int | None, tokens: int | None) -> list[str]:
    """SGLang's three tree flags (none: its own auto choice)."""
    if steps is None:
        return []
    return [
        "--speculative-num-steps", str(steps),
        "--speculative-eagle-topk", str(topk),
        "--speculative-num-draft-tokens", str(tokens),
    ]  # fmt: skip


def _pard(config: DecodeConfig, target: str, spec: str) -> Export:
    """vLLM's parallel drafting with a draft model: PARD (vllm/config/speculative.py
    `parallel_drafting`; the mask token read from the draft's config.json)."""
    notes: list[str] = []
    if config.k < 1:
        raise SpecdecError(f"--k must be at least 1 to export (got {config.k})")
    path = _resolve("draft", spec, notes)
    if _same_vocabulary(target, spec) is False:
        raise SpecdecError(
            "vLLM cannot serve a PARD draft of another tokenizer: its parallel drafting feeds "
            "the draft's ids to the target as they are (the V1 draft-model proposer maps "
            "vocabularies only for autoregressive drafts); use a PARD draft of the target's family"
        )
    folder = _folder_of(path)
    values = _config_json(folder) if folder is not None else None
    if values is None:
        notes.append(
            f"{path}'s config.json is not on this machine to check: vLLM reads the mask token "
            "from its pard_token (or mask_token_id / ptd_token_id) and refuses a draft without one"
        )
    elif stated_mask_token(values) is None:
        raise SpecdecError(
            f"{path}'s config.json names no mask token, and vLLM's parallel drafting stops at "
            "start without one (vllm/v1/spec_decode/llm_base_proposer.py "
            "_init_parallel_drafting_params: 'the draft model config must have ... pard_token'): "
            f'add "{PARD_TOKEN}": ID, the id it was adapted with, or train one with '
            "`specdec train pard`"
        )
    notes.append(
        "vLLM runs the PARD draft once per step over the new tokens and k - 1 mask tokens, "
        "as the playground does; it verifies the chain with its rejection sampler"
    )
    target_id = _target(target, notes)
    payload = {
        "method": "draft_model",
        "model": path,
        "num_speculative_tokens": config.k,
        "parallel_drafting": True,
    }
    return _vllm(payload, target_id, config, notes)


def _dflash(engine: str, method: str, config: DecodeConfig, target: str, spec: str) -> Export:
    """A DFlash drafter's block as each engine serves it (the sources in the module
    docstring): vLLM's `dflash` with num_speculative_tokens = block − 1, SGLang's DFLASH with
    the block; DDTree exported as the same chain."""
    notes: list[str] = []
    path = _dflash_path(spec, notes)
    facts = dflash_facts(_config_json(_folder_of(path)))
    block = config.method_int("block", 0, method)
    if facts is None:
        notes.append(
            f"{path}'s config.json is not on this machine to check: the engines read a DFlash "
            "drafter in z-lab's layout (SGLang) or z-lab's and the speculators layout (vLLM)"
        )
    trained = facts.block_size if facts is not None else None
    if block == 1 or block < 0 or (trained is not None and block > trained):
        raise SpecdecError(
            f"--method-param block={block}: a DFlash block has 2 rows or more "
            + (f"and this drafter's at most {trained} (its block_size)" if trained else "")
            + "; choose one in that range, or 0 for the drafter's own block_size"
        )
    block = block or trained or 0
    if engine == "sglang" and facts is not None and facts.layout == "speculators":
        raise SpecdecError(
            "SGLang reads DFlash drafters in z-lab's layout only (python/sglang/srt/speculative/"
            "dflash_utils.py parse_dflash_draft_config reads dflash_config and block_size, not "
            "a speculators config): serve this one with --engine vllm, or give --dflash a "
            "drafter in z-lab's layout"
        )
    if method == "ddtree":
        notes.append(
            f"{engine} is given the DFlash chain of the same drafter, its nearest equivalent: "
            + (
                "vLLM has no DDTree (its DFlash proposer drafts one chain per block, "
                "vllm/v1/spec_decode/dflash.py)"
                if engine == "vllm"
                else "SGLang's DDTREE worker (python/sglang/srt/speculative/ddtree_worker.py) "
                "is in no --speculative-algorithm choice of the server arguments read "
                "(arg_groups/fields/spec.py)"
            )
            + "; the tree's node budget does not carry over, so expect dflash's τ, not ddtree's"
        )
    target_id = _target(target, notes)
    if engine == "vllm":
        if not block:
            raise SpecdecError(
                "vLLM needs num_speculative_tokens for a DFlash drafter and its config.json is "
                "not here to read block_size from: give --method-param block=N (the drafter's "
                "block_size, or less)"
            )
        notes.append(
            f"vLLM runs the drafter once per step over a block of {block} rows (the pending "
            f"token and {block - 1} mask tokens: 1 + num_speculative_tokens queries, "
            "vllm/v1/spec_decode/dflash.py) as the playground does, and verifies the chain "
            "with its rejection sampler; it loads the drafter as DFlashQwen3ForCausalLM "
            "whatever the target's family"
        )
        payload = {"method": "dflash", "model": path, "num_speculative_tokens": block - 1}
        return _vllm(payload, target_id, config, notes)
    flags = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", path]
    if block:
        flags += ["--speculative-dflash-block-size", str(block)]
    else:
        notes.append("SGLang reads the block size from the drafter's config.json")
    notes.append(
        "SGLang's DFLASH drafts on GPU attention backends only (flashinfer, fa3, fa4, triton; "
        "python/sglang/srt/speculative/dflash_worker.py) and verifies one block per step"
    )
    if facts is not None and facts.draft_vocab_size is not None:
        notes.append(
            "this drafter drafts over a reduced vocabulary (draft_vocab_size, lm_head, d2t); "
            "whether SGLang's DFLASH reads it was not checked in the sources read (vLLM does)"
        )
    return _sglang(flags, target_id, config, notes)


@dataclass(frozen=True)
class DFlashFacts:
    """What export and the serving check read of a DFlash drafter's config.json (torch-free;
    heads/dflash/formats.py reads the whole drafter)."""

    layout: str  # "zlab" or "speculators"
    block_size: int
    head_dim: int | None
    draft_vocab_size: int | None  # a reduced draft vocabulary (None: the target's)


def dflash_facts(values: dict | None) -> DFlashFacts | None:
    """The facts of a DFlash config.json in z-lab's or the speculators layout (None: no
    config, or not a DFlash drafter's)."""
    if values is None:
        return None
    if values.get("speculators_model_type") == "dflash":
        layout, body = "speculators", values.get("transformer_layer_config") or {}
        block = values.get("block_size")
    elif "dflash_config" in values or "DFlashDraftModel" in (values.get("architectures") or []):
        layout, body = "zlab", values
        block = values.get("block_size") or (values.get("dflash_config") or {}).get("block_size")
    else:
        return None
    if not isinstance(block, int) or block < 2:
        return None
    heads = body.get("num_attention_heads")
    head_dim = body.get("head_dim") or (
        body["hidden_size"] // heads if heads and body.get("hidden_size") else None
    )
    vocab = values.get("draft_vocab_size")
    reduced = vocab if isinstance(vocab, int) and vocab != body.get("vocab_size") else None
    return DFlashFacts(layout, block, int(head_dim) if head_dim else None, reduced)


def dflash_drafter_facts(spec: str) -> DFlashFacts | None:
    """`dflash_facts` of the drafter `--dflash SPEC` names, where its config.json is on this
    machine (None otherwise)."""
    return dflash_facts(_config_json(_folder_of(_dflash_path(spec, []))))


def _dflash_path(spec: str, notes: list[str]) -> str:
    """The directory or hub id of `--dflash SPEC`; `embedded` is the bundled drafter."""
    if spec != "embedded":
        return _local_or_hub(spec)
    bundled = resource_path("dflash")
    if not (bundled / "config.json").is_file():
        raise SpecdecError(
            "this install has no bundled DFlash drafter; pass --dflash with a drafter directory "
            "or hub id (train one with specdec train dflash)"
        )
    notes.append(
        f"the bundled DFlash drafter is the local directory {bundled} (z-lab's layout, what both "
        "engines read): copy it to the server"
    )
    return str(bundled)


def _medusa(config: DecodeConfig, target: str, spec: str) -> Export:
    """vLLM's Medusa: the heads' directory in vLLM's layout, a chain of the first k heads."""
    notes: list[str] = []
    path = _resolve("medusa", spec, notes)
    folder = _folder_of(path)
    heads = None
    if folder is not None:
        if any((folder / name).is_file() for name in MEDUSA_FASTERDECODING):
            raise SpecdecError(
                f"vLLM cannot load the Medusa heads in {path} as they stand: they are in "
                "FasterDecoding's layout (medusa_lm_head.*, medusa_head.* keys), and vLLM's "
                "Medusa loader (vllm/model_executor/models/medusa.py load_weights) reads "
                "blocks.* / lm_heads.* only; write them in vLLM's layout with --head-out DIR"
            )
        heads = _medusa_heads(_config_json(folder))
    else:
        notes.append(
            f"{path} is not on this machine to check: vLLM loads Medusa heads in its own layout "
            "only (blocks.* / lm_heads.*), with at least num_speculative_tokens heads"
        )
    depth = config.tree_depth
    if depth is None:
        if heads is None:
            raise SpecdecError(
                "vLLM needs num_speculative_tokens for Medusa heads, and their config.json is "
                "not here to count them: give --tree-depth N (at most their number of heads)"
            )
        depth = heads
        notes.append(
            f"tree size is 'auto' here: num_speculative_tokens is the heads' number, {heads}"
        )
    elif heads is not None and depth > heads:
        notes.append(f"the tree depth {depth} is capped at the heads' number, {heads}")
        depth = heads
    notes.append(
        "vLLM's Medusa proposer drafts a chain, each head's top-1 token "
        "(vllm/v1/spec_decode/medusa.py), verified by its rejection sampler: the tree's depth "
        "becomes num_speculative_tokens (vLLM builds that many heads and leaves the rest "
        "unread); top-k, tree size and typical acceptance do not carry over"
    )
    target_id = _target(target, notes)
    payload = {"method": "medusa", "model": path, "num_speculative_tokens": depth}
    return _vllm(payload, target_id, config, notes)


def _medusa_heads(values: dict | None) -> int | None:
    """The heads' number as vLLM's MedusaConfig.from_pretrained reads config.json (a key holding
    "num" and "heads"; its default 5)."""
    if values is None:
        return None
    for key, value in values.items():
        if "num" in key and "heads" in key:
            return int(value)
    return 5


def _speculator(config: DecodeConfig, target: str, spec: str) -> Export:
    """vLLM's MLP speculator: a chain of k <= n_predict tokens."""
    notes: list[str] = []
    path = _resolve("speculator", spec, notes)
    folder = _folder_of(path)
    values = _config_json(folder) if folder is not None else None
    if config.k < 1:
        raise SpecdecError(f"--k must be at least 1 to export (got {config.k})")
    if values is not None:
        declared = values.get("model_type")
        if declared is not None and declared != "mlp_speculator":
            raise SpecdecError(
                f"{path} is a '{declared}' model, not an MLP speculator (model_type "
                "'mlp_speculator'); pass a speculator directory to --speculator"
            )
        n_predict = int(values.get("n_predict", 3))  # vLLM's MLPSpeculatorConfig default
        if config.k > n_predict:
            raise SpecdecError(
                f"the speculator drafts at most {n_predict} tokens (n_predict); give --k 1 to "
                f"{n_predict}"
            )
    notes.append(
        "vLLM's V1 engine does not draft with an MLP speculator: its model registry "
        "(vllm/model_executor/models/registry.py) has MLPSpeculatorPreTrainedModel commented "
        "out ('Re-enable this once the MLP Speculator is supported in V1') and the V1 runner "
        "stops with 'Unknown speculative decoding method: mlp_speculator' (vllm issue #47825): "
        "serve it with a vLLM release that still has the V0 engine (VLLM_USE_V1=0)"
    )
    target_id = _target(target, notes)
    payload = {"method": "mlp_speculator", "model": path, "num_speculative_tokens": config.k}
    return _vllm(payload, target_id, config, notes)


def _mtp(engine: str, method: str, config: DecodeConfig, target: str, spec: str) -> Export:
    """The target's own MTP layer: vLLM method "mtp" (a chain), SGLang NEXTN (a chain or a
    tree); `spec` `embedded` is the target's own checkpoint, else another copy of it."""
    notes: list[str] = []
    found = _mtp_target(target, notes)
    family = found[0] if found is not None else None
    if engine == "sglang" and found is not None:
        refusal = _mtp_sglang_refusal(*found)
        if refusal is not None:
            raise SpecdecError(refusal)
    copy = None if spec in ("embedded", "") else _local_or_hub(spec)
    if engine == "vllm" and is_tree(method) and _auto_tree(config):
        steps, topk, tokens = config.k, 1, config.k + 1
        notes.append(
            f"tree size is 'auto' here: vLLM drafts a chain, num_speculative_tokens is k ({steps})"
        )
    else:
        steps, topk, tokens = _shape(method, config, notes)
    target_id = _target(target, notes)
    name = family.vllm_model_type if family is not None else "deepseek_mtp, qwen3_next_mtp, ..."
    if engine == "vllm":
        payload: dict = {"method": "mtp", "num_speculative_tokens": steps}
        if copy is not None:
            payload["model"] = copy
        notes.append(
            "vLLM drafts from the target's own checkpoint (method 'mtp' without a model) and "
            "runs its one MTP layer for every draft step, as the playground does; older vLLM "
            f"releases name the method by family ({name})"
        )
        if is_tree(method):
            notes.append(
                "vLLM's MTP proposer drafts a chain: the tree's depth becomes "
                "num_speculative_tokens; top-k and tree size do not carry over"
            )
        return _vllm(payload, target_id, config, notes)
    flags = ["--speculative-algorithm", "NEXTN", "--speculative-draft-model-path"]
    flags.append(copy or target_id)
    flags += _tree_flags(steps, topk, tokens)
    notes.append(
        "NEXTN is SGLang's name for EAGLE drafting with the model's own MTP layer (server_args.py "
        "turns NEXTN into EAGLE); the draft path is the target's checkpoint, whose architecture "
        "SGLang maps to its MTP model "
        f"({family.sglang_draft if family else 'model_config.py _config_draft_model'}); "
        "SGLang's NextN layer does not zero the position-0 embedding as vLLM and the playground "
        "do (docs/mtp.md; only the draft's first cached row differs)"
    )
    return _sglang(flags, target_id, config, notes)


def _auto_tree(config: DecodeConfig) -> bool:
    return config.tree_depth is None and config.tree_topk is None and config.tree_tokens is None


def _mtp_target(target: str, notes: list[str]) -> tuple[MtpTarget, str] | None:
    """(the MTP family, the architecture) of `target` from its config.json; None (with a note)
    when the file is not on this machine; a SpecdecError when the target has no MTP layer the
    engines draft with."""
    if target in EMBEDDED:
        raise SpecdecError(
            f"the embedded target ({EMBEDDED_HUB_ID}, LlamaForCausalLM) has no MTP layer; "
            f"methods mtp and mtp-tree serve a {MTP_FAMILIES} target"
        )
    if target.endswith(".gguf"):
        raise SpecdecError(
            "vLLM and SGLang read the MTP layer from the original checkpoint, not a .gguf; "
            "pass the checkpoint's directory or hub id as --target"
        )
    folder = _folder_of(target)
    values = _config_json(folder) if folder is not None else None
    if values is None:
        notes.append(
            f"{target}'s config.json is not on this machine to check: vLLM and SGLang draft "
            f"with the MTP layers of {MTP_FAMILIES} checkpoints"
        )
        return None
    architecture = (values.get("architectures") or [""])[0]
    model_type = values.get("model_type", "")
    for family in MTP_TARGETS:
        if architecture in family.architectures or model_type in family.model_types:
            break
    else:
        raise SpecdecError(
            f"{target} ({architecture or model_type or 'no architecture'}) has no MTP layer the "
            f"engines draft with: vLLM and SGLang map {MTP_FAMILIES} checkpoints to their MTP "
            "models (vllm/config/speculative.py hf_config_override, sglang model_config.py "
            "_config_draft_model)"
        )
    count = stated_count(values)
    if count == 0:
        raise SpecdecError(
            f"{target}'s config.json gives no MTP layer (num_nextn_predict_layers / "
            "mtp_num_hidden_layers 0); use a checkpoint that ships one"
        )
    return family, architecture


def _mtp_sglang_refusal(family: MtpTarget, architecture: str) -> str | None:
    if architecture and architecture not in family.sglang_architectures:
        return (
            f"SGLang drafts with {family.family}'s MTP layer for "
            f"{' / '.join(family.sglang_architectures)} checkpoints only (python/sglang/srt/"
            f"configs/model_config.py _config_draft_model), and this one is {architecture}; "
            "serve it with --engine vllm"
        )
    return None


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
        # (DDTree's has no depth or top-k: "8/None/None")
        tokens, depth, topk = (
            None if v == "None" else int(v) for v in best.aggregate.tree.split("/")
        )
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


def _peagle_notes(path: str | None) -> list[str]:
    """What vLLM needs of a P-EAGLE head directory (heads/eagle/peagle.py), from its config:
    refused when it is not a P-EAGLE head."""
    config = _config_json(Path(path)) if path is not None and Path(path).is_dir() else None
    if config is None:
        return [
            "the head is not on this machine, so its layout is unchecked: vLLM loads a P-EAGLE "
            'head in speculators\' peagle layout (config.json speculators_model_type "peagle")'
        ]
    if not is_peagle(config):
        raise SpecdecError(
            "method 'peagle' drafts with a P-EAGLE head (an EAGLE-3 head with mask_hidden) and "
            f"{path} is not one; pass --head with a P-EAGLE head (speculators trains one: "
            "--speculator-type peagle)"
        )
    if config.get("speculators_model_type") != "peagle":
        return [
            "the head is in the EAGLE-3 layout with P-EAGLE's additions: --head-out DIR writes "
            "it in speculators' peagle layout, which vLLM reads (mask_token_id as pard_token)"
        ]
    top_only = [flag for flag in ("fc_norm", "norm_output") if config.get(flag)]
    layer = config.get("transformer_layer_config") or {}
    if any(not layer.get(flag) for flag in top_only):
        return [
            f"the head sets {' and '.join(top_only)} at the top of config.json only, where vLLM's "
            "update_peagle (transformers_utils/configs/speculators/algos.py) does not copy them "
            "from: --head-out DIR writes them into transformer_layer_config too"
        ]
    return []


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
    """The path or hub id the engine loads for model option `needs` given `spec`."""
    if spec == "smollm2" and needs in ("draft", "head"):  # the embedded target itself
        return EMBEDDED_HUB_ID
    if needs == "head" and names_bundled_head(spec):
        bundled = bundled_head(spec)
    elif spec != "embedded":
        return _local_or_hub(spec)
    else:
        bundled = resource_path(BUNDLED[needs])
        if not (bundled / "config.json").is_file():
            raise SpecdecError(
                f"this install has no bundled {WHAT.get(needs, needs)}; pass --{needs} with a "
                "directory or hub id"
            )
    if needs == "head":
        notes.append(
            f"the bundled EAGLE head is the local directory {bundled}; --head-out DIR writes it "
            "as the engine loads it as it stands (copy DIR to the server)"
        )
    elif needs == "draft":
        notes.append(
            f"the bundled draft model is the local directory {bundled} (a LlamaForCausalLM): "
            "copy it to the server"
        )
    else:
        notes.append(
            f"the bundled {WHAT[needs]} are the local directory {bundled}; --head-out DIR "
            "writes them in vLLM's layout (copy DIR to the server)"
        )
    return str(bundled)


def _local_or_hub(spec: str) -> str:
    """A local path made absolute, or the hub id as it is."""
    local = Path(spec).expanduser()
    return str(local.resolve()) if local.exists() else spec


def _folder_of(spec: str) -> Path | None:
    """The directory holding `spec`'s files on this machine: a local directory, or the cached
    snapshot of a hub id (None: neither)."""
    local = Path(spec).expanduser()
    if local.is_dir():
        return local
    from specdec_core.models import hub  # huggingface_hub, imported only for a hub id

    if not hub.is_hub_spec(spec):
        return None
    return hub.cached_snapshot(*hub.parse_spec(spec))


def _config_json(folder: Path | None) -> dict | None:
    """config.json of `folder` as a dict (None: absent or unreadable)."""
    if folder is None or not (folder / "config.json").is_file():
        return None
    try:
        values = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return values if isinstance(values, dict) else None


@dataclass(frozen=True)
class _Vocabulary:
    size: int | None  # config.json vocab_size (what vLLM compares)
    tokens: dict[str, int] | None  # token -> id from tokenizer.json


def _same_vocabulary(target: str, draft: str) -> bool | None:
    """Does the classic draft tokenize as the target does? From their tokenizer.json files
    (else the config.json vocabulary sizes, vLLM's own check) where they are on this machine;
    None when that cannot be told here."""
    if draft == "smollm2" or (draft == "embedded" and target in EMBEDDED):
        return True  # the bundled draft was trained on the embedded target's tokenizer
    ours, theirs = _vocabulary(target, True), _vocabulary(draft, False)
    if ours is None or theirs is None:
        return None
    if ours.tokens is not None and theirs.tokens is not None:
        return ours.tokens == theirs.tokens
    if ours.size is not None and theirs.size is not None and ours.size != theirs.size:
        return False
    return None


def _vocabulary(spec: str, is_target: bool) -> _Vocabulary | None:
    embedded = spec in EMBEDDED if is_target else spec == "embedded"
    if embedded:  # SmolLM2's tokenizer: the bundled draft's size, the hub cache's tokenizer
        values = _config_json(resource_path(BUNDLED["draft"]))
        return _Vocabulary(_vocab_size(values), _tokens(_folder_of(EMBEDDED_HUB_ID)))
    folder = _folder_of(spec)
    if folder is None:
        return None
    return _Vocabulary(_vocab_size(_config_json(folder)), _tokens(folder))


def _vocab_size(values: dict | None) -> int | None:
    if values is None:
        return None
    size = values.get("vocab_size") or (values.get("text_config") or {}).get("vocab_size")
    return int(size) if size else None


def _tokens(folder: Path | None) -> dict[str, int] | None:
    """token -> id of `folder`'s tokenizer.json, added tokens included (None: none readable)."""
    if folder is None or not (folder / "tokenizer.json").is_file():
        return None
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab(True)
    except Exception:  # tokenizers raises plain Exception for a file it cannot parse
        return None


def _target(spec: str, notes: list[str]) -> str:
    if spec in EMBEDDED:
        notes.append(
            f"the embedded target is {EMBEDDED_HUB_ID} (served from its original checkpoint, "
            "not the GGUF)"
        )
        return EMBEDDED_HUB_ID
    if spec.endswith(".gguf"):
        notes.append("vLLM / SGLang speculation wants the original checkpoint, not a .gguf")
    return spec

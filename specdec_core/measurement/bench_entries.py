"""`specdec bench --methods` entries: which method runs, with which model and policy.

    ENTRY  = METHOD[@SPEC][:POLICY[:PARAM[/PARAM…]]]      PARAM = NAME=VALUE

- `@SPEC` names the model the method needs besides the target, for this entry only: an EAGLE
  head for `eagle` / `eagle2` / `eagle2-lookup` / `eagle2-suffix`, the draft for `classic` /
  `hf-assisted`, the DFlash drafter for `dflash` / `ddtree` (one drafter, loaded once, serves
  both); SPEC is `embedded`, a directory or a hub id, and holds no `:`. Without it the entry
  uses its kind's flag (`--head`, `--draft`, `--dflash`, …). A method that needs no model
  refuses `@`.
- `:POLICY…` names a verification policy and its parameters, e.g. `ngram:threshold:tau=0.3`
  or `classic:hybrid:ngram_tau=0.5/logit_tau=0.1`. A bare `METHOD` uses `--policy` /
  `--policy-param`; `METHOD:POLICY` uses that policy's defaults plus the parameters written
  after it.

Both combine: `eagle@heads/v2:threshold:tau=0.3`. Rows and tables are keyed by the entry as
written (`Entry.label`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from specdec_core.decoding.config import DecodeConfig, parse_params
from specdec_core.errors import SpecdecError
from specdec_core.run.runner import extra_kind


@dataclass(frozen=True)
class Entry:
    """One `--methods` entry: `METHOD[@SPEC][:POLICY[:NAME=VALUE[/NAME=VALUE…]]]`."""

    label: str  # as written: the key of its rows and aggregate
    method: str
    config: DecodeConfig  # the run's config with the entry's policy
    spec: str | None = None  # the model after `@` (None: --head / --draft)

    def specs(self, specs: Mapping[str, str]) -> dict[str, str]:
        """The run's model specs (kind -> spec: `--head`, `--draft`) with this entry's own
        `@SPEC` in place of its kind's."""
        kind = extra_kind(self.method)
        return {**specs, kind: self.spec} if self.spec and kind else dict(specs)


def entry_method(label: str) -> str:
    """The METHOD of an entry, without its `@SPEC` and `:POLICY…`."""
    return label.partition(":")[0].partition("@")[0]


def parse_entry(label: str, config: DecodeConfig) -> Entry:
    """The entry `label` (the grammar above) over the run's `config`."""
    name, _, rest = label.partition(":")
    method, at, spec = name.partition("@")
    if at and (not spec or extra_kind(method) is None):
        what = "an empty model spec" if not spec else f"'{method}' needs no model"
        raise SpecdecError(f"bench entry '{label}': {what}; write METHOD@SPEC for a head or draft")
    if rest:
        policy, _, param_text = rest.partition(":")
        params = parse_params(filter(None, param_text.split("/")), f"'{label}'")
        config = replace(config, policy=policy, policy_params=params)
    return Entry(label, method, config, spec or None)


def parse_variant(label: str, config: DecodeConfig) -> tuple[str, DecodeConfig]:
    """(method, config with the entry's policy) of an entry (`parse_entry`)."""
    entry = parse_entry(label, config)
    return entry.method, entry.config

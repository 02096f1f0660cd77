"""Models and EAGLE heads from the Hugging Face hub: the files `from_pretrained` reads, no more.

A hub spec is `owner/name` or `owner/name@revision` (a branch, tag or commit). `fetch` lists
the repository (online: `HfApi.model_info`; offline or unreachable: the cached snapshot), takes
`config.json` first (so a config can be refused before gigabytes of weights arrive), then the
tokenizer files the repo has and the weights `checkpoint.weight_names` picks — never a second
copy such as `original/`. Each file comes through `hf_hub_download`, so the Hugging Face cache
is shared with every other tool, a download cut off half-way is resumed (or restarted) from its
`.incomplete` blob next time, and a snapshot only ever links complete files.

Progress: with `bars`, huggingface_hub's own tqdm bars on stderr (the CLI); otherwise
`Progress(message, fraction)` about every quarter second ("downloading
model-00001-of-00004.safetensors: 1.2 / 4.9 GB, about 3 min left"). A `StopFlag` is checked
between files and between downloaded chunks (`control.Cancelled`).

Errors say what to do: a gated or private repo asks for `hf auth login`, an unknown revision
names it, offline and not cached says so.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

from huggingface_hub import HfApi, constants, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.utils import tqdm as hub_tqdm

from specdec_core.control import Progress, StopFlag, check_stop
from specdec_core.errors import SpecdecError, first_line
from specdec_core.files import format_size
from specdec_core.models.checkpoint import CONFIG, TOKENIZER_FILES, weight_names

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def parse_spec(spec: str) -> tuple[str, str | None]:
    """`owner/name[@revision]` -> (repo id, revision or None)."""
    repo, _, revision = spec.strip().partition("@")
    return repo, (revision or None)


def is_hub_spec(spec: str) -> bool:
    return bool(REPO_ID.match(parse_spec(spec)[0]))


def fetch(
    spec: str,
    *,
    what: str = "model",
    tokenizer: bool = True,
    code: bool = False,
    check_config: Callable[[dict], None] | None = None,
    progress: Progress | None = None,
    stop: StopFlag | None = None,
    bars: bool = False,
) -> Path:
    """The snapshot directory of `spec` holding config.json, the tokenizer files (when
    `tokenizer`), the repo's top-level `.py` files (when `code`: trusted remote code) and the
    weights; `check_config(config)` runs once config.json is here, before any weight."""
    repo, revision = parse_spec(spec)
    report = progress or (lambda message, fraction: None)
    report(f"looking up {spec} on the Hugging Face hub (or its local cache)", 0.02)
    sizes, commit, cached = _listing(repo, revision, what, spec)
    config_path = Path(_download(repo, CONFIG, commit, what, spec, None))
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise SpecdecError(f"{spec}: its config.json is not valid JSON; check the repo") from None
    if check_config is not None:
        check_config(config)
    wanted = [name for name in TOKENIZER_FILES if tokenizer and name in sizes]
    if code:
        wanted += sorted(name for name in sizes if name.endswith(".py") and "/" not in name)
    folder = config_path.parent

    def read_index(name: str) -> str:
        return Path(_download(repo, name, commit, what, spec, None)).read_text(encoding="utf-8")

    weights = weight_names(sizes, read_index)
    if not weights and cached:  # the snapshot links complete files only
        raise _not_here(what, spec, "its weights are")
    if not weights:
        raise SpecdecError(
            f"{what} '{spec}' has no weights the loader reads (model.safetensors, "
            "pytorch_model.bin or a sharded index); check the id"
        )
    files = [*wanted, *weights]
    meter = _Meter(report, {name: sizes.get(name) or 0 for name in files}, stop)
    for name in files:
        check_stop(stop, "the download")
        meter.begin(name)
        _download(repo, name, commit, what, spec, None if bars else meter.bar_class())
        meter.end(name)
    report(f"{spec} is here ({format_size(meter.total)})", 0.5)
    return folder


def _listing(repo: str, revision: str | None, what: str, spec: str) -> tuple[dict, str, bool]:
    """({file name: size or None}, commit, from the cache) from the hub, or the cache when
    offline or the hub cannot be reached."""
    if not constants.HF_HUB_OFFLINE:
        try:
            info = HfApi().model_info(repo, revision=revision, files_metadata=True)
            sizes = {s.rfilename: s.size for s in info.siblings or ()}
            return sizes, info.sha or revision, False
        except (GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError) as error:
            raise _user_error(error, what, spec) from None
        except HFValidationError:
            raise _invalid(spec) from None
        except HfHubHTTPError as error:
            status = getattr(getattr(error, "response", None), "status_code", None)
            if status in (401, 403):
                raise _user_error(error, what, spec) from None
        except Exception:  # no network, a proxy, a timeout: the cache may still have it
            pass
    snapshot = cached_snapshot(repo, revision)
    if snapshot is None:
        raise _not_here(what, spec)
    names = {
        str(path.relative_to(snapshot)): None for path in snapshot.rglob("*") if path.is_file()
    }
    return names, snapshot.name, True


def cached_snapshot(repo: str, revision: str | None = None) -> Path | None:
    """The cached snapshot folder of `repo` at `revision` (a ref or a commit), if any."""
    try:
        folder = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo, repo_type="model")
    except HFValidationError:
        return None
    ref = folder / "refs" / (revision or "main")
    commit = ref.read_text().strip() if ref.is_file() else revision
    snapshot = folder / "snapshots" / commit if commit else None
    return snapshot if snapshot is not None and snapshot.is_dir() else None


def _download(repo, name, commit, what, spec, bar_class) -> str:
    try:
        return hf_hub_download(repo, name, revision=commit, tqdm_class=bar_class)
    except (GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError) as error:
        raise _user_error(error, what, spec) from None
    except HFValidationError:
        raise _invalid(spec) from None
    except (LocalEntryNotFoundError, OfflineModeIsEnabled):
        raise _not_here(what, spec, f"{name} is") from None
    except EntryNotFoundError:
        raise SpecdecError(
            f"{what} '{spec}' has no {name} on the hub though its listing names it; try again"
        ) from None
    except HfHubHTTPError as error:
        status = getattr(getattr(error, "response", None), "status_code", None)
        if status in (401, 403):
            raise _user_error(error, what, spec) from None
        raise SpecdecError(
            f"downloading {name} of '{spec}' failed ({first_line(error)}); try again (the "
            "download resumes)"
        ) from None
    except OSError as error:  # a connection lost mid-file, a full disk
        raise SpecdecError(
            f"downloading {name} of '{spec}' failed ({first_line(error)}); check your network "
            "and free disk space, then try again (the download resumes)"
        ) from None


def _user_error(error: Exception, what: str, spec: str) -> SpecdecError:
    repo, revision = parse_spec(spec)
    if isinstance(error, RevisionNotFoundError):
        return SpecdecError(
            f"'{repo}' has no revision '{revision}'; check the branch, tag or commit after @"
        )
    if isinstance(error, GatedRepoError):
        return SpecdecError(
            f"{what} '{repo}' is gated: accept its terms on https://huggingface.co/{repo}, "
            "then run `hf auth login` and try again"
        )
    return SpecdecError(
        f"cannot get {what} '{repo}': it is private or does not exist; check the id, or run "
        "`hf auth login` if it is private"
    )


def _invalid(spec: str) -> SpecdecError:
    return SpecdecError(
        f"'{spec}' is neither 'embedded', an existing path, nor a valid hub id "
        "(owner/name[@revision]); check the spelling"
    )


def _not_here(what: str, spec: str, name: str | None = None) -> SpecdecError:
    part = f" ({name} not fully downloaded)" if name else ""
    if constants.HF_HUB_OFFLINE:
        hint = (
            "the hub is offline (HF_HUB_OFFLINE=1) and it is not in the local cache"
            f"{part}; download it once online or pass a local directory"
        )
    else:
        hint = f"the hub cannot be reached and it is not in the local cache{part}; check your "
        hint += "network, or pass a local directory"
    return SpecdecError(f"cannot get {what} '{spec}': {hint}")


class _Meter:
    """Bytes done across the files of one fetch, as Progress messages with the time left."""

    def __init__(self, report: Progress, sizes: dict[str, int], stop: StopFlag | None) -> None:
        self.report, self.sizes, self.stop = report, sizes, stop
        self.total = sum(sizes.values())
        self.done = 0  # bytes of finished files
        self.name = ""
        self.started = time.monotonic()
        self.fetched = 0  # bytes that came over the network in this fetch (for the rate)
        self.shown = 0.0

    def begin(self, name: str) -> None:
        self.name = name
        self.report(f"fetching {name}", self._fraction(0))

    def end(self, name: str) -> None:
        self.done += self.sizes.get(name, 0)

    def _fraction(self, current: int) -> float:
        return 0.05 + 0.45 * ((self.done + current) / self.total if self.total else 0.0)

    def show(self, current: int, size: int, delta: int) -> None:
        check_stop(self.stop, "the download")
        self.fetched += delta
        now = time.monotonic()
        if now - self.shown < 0.25 and current < size:
            return
        self.shown = now
        rate = self.fetched / max(now - self.started, 1e-3)
        left = max(self.total - self.done - current, size - current, 0)
        eta = f", about {_duration(left / rate)} left" if rate > 0 and left else ""
        self.report(
            f"downloading {self.name}: {format_size(current)} / {format_size(size)}{eta}",
            self._fraction(current),
        )

    def bar_class(self) -> type:
        meter = self

        class Bar(hub_tqdm):  # what hf_hub_download updates chunk by chunk; never drawn
            def __init__(self, *args, **kwargs) -> None:
                self._current = int(kwargs.get("initial") or 0)
                self._size = int(kwargs.get("total") or meter.sizes.get(meter.name) or 0)
                kwargs["disable"] = True
                super().__init__(*args, **kwargs)

            def update(self, n: float | None = 1) -> bool | None:
                self._current += int(n or 0)
                meter.show(self._current, max(self._size, self._current), int(n or 0))
                return None

        return Bar


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"

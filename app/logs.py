"""The GUI's log file: tracebacks go here, the user sees one line (dialog or status bar).

`log_path()` is `specdec-gui.log` in the platformdirs user log dir (`SPECDEC_LOG_DIR`
overrides it); Help ▸ About shows it. `setup_logging()` sends warnings and errors of every
logger there (rotated at 1 MB, three files kept) and routes exceptions that escape a Qt slot
to the log instead of ending the process.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path

from platformdirs import user_log_dir

FILENAME = "specdec-gui.log"
log = logging.getLogger("specdec-gui")


def log_path() -> Path:
    return Path(os.environ.get("SPECDEC_LOG_DIR") or user_log_dir("specdec-playground")) / FILENAME


def setup_logging(path: Path | None = None) -> Path | None:
    """Log to `path` (default `log_path()`); None when the directory cannot be written."""
    path = path or log_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=1_000_000, backupCount=3, encoding="utf-8"
        )
    except OSError:
        return None
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(min(root.level or logging.WARNING, logging.WARNING))
    sys.excepthook = _log_uncaught
    return path


def _log_uncaught(kind, error, trace) -> None:
    """An exception that escaped a slot: into the log, not a crash of the window."""
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, error, trace)
        return
    log.error("uncaught exception", exc_info=(kind, error, trace))

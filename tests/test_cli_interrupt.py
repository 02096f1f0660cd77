"""Stop reaches a command even when it was started with SIGINT ignored (a shell starts
background commands that way, and Python keeps ignoring it): the Train tab's Stop and
Ctrl+C send SIGINT."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import os, signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)  # as inherited from a background shell job
from specdec_core.cli import interruptible
interruptible()
os.kill(os.getpid(), signal.SIGINT)
time.sleep(20)
print("still running")
"""


def test_a_command_started_with_sigint_ignored_is_still_interrupted_by_it():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr
    assert "still running" not in done.stdout

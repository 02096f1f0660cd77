"""Entry point of `specdec-gui`: open the playground window (the embedded model loads at once).

Before Qt starts, a system without the libraries Qt's xcb platform plugin needs gets one line
naming them and the apt-get command that installs them, and exit status 2
(`app/qt_platform.py`). Ctrl+C and SIGTERM close the window (settings saved, the engine
process ended) and end the process within seconds, whatever it is doing (`app/signals.py`).
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specdec-gui", description=__doc__)
    parser.add_argument("--target", help="model spec to load instead of the saved one")
    parser.add_argument("--no-load", action="store_true", help="do not load a model at start")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the engine in the window's process (also SPECDEC_IN_PROCESS=1); by default "
        "it runs in its own, so that painting does not slow down what it measures",
    )
    args, qt_args = parser.parse_known_args(argv if argv is not None else sys.argv[1:])

    from app import qt_platform

    problem = qt_platform.problem(qt_args=qt_args)
    if problem:
        print(f"specdec-gui: {problem}", file=sys.stderr)
        return qt_platform.EXIT_CODE

    from PySide6.QtWidgets import QApplication

    from app import qt_compat
    from app.logs import setup_logging
    from app.main_window import MainWindow
    from app.signals import SignalExit

    setup_logging()
    qt_compat.apply()
    app = QApplication.instance() or QApplication([sys.argv[0], *qt_args])
    app.setApplicationName("specdec-playground")
    app.setOrganizationName("specdec-playground")
    window = MainWindow(engine=make_engine(args.in_process), autoload=not args.no_load)
    if args.target:
        window.models.target.set_spec(args.target)
    SignalExit(app, window)  # the window owns it
    window.show()
    return app.exec()


def make_engine(in_process: bool = False):
    """The engine in its own process, unless asked for in this one."""
    from app.engine import SpecdecEngine
    from app.process_engine import ProcessEngine

    if in_process or os.environ.get("SPECDEC_IN_PROCESS", "") not in ("", "0"):
        return SpecdecEngine()
    return ProcessEngine()


if __name__ == "__main__":
    raise SystemExit(main())

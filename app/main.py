"""Entry point of `specdec-gui`."""

from __future__ import annotations

import sys


def main() -> int:
    from PySide6.QtWidgets import QApplication, QLabel

    app = QApplication.instance() or QApplication(sys.argv)
    label = QLabel("specdec-playground")
    label.show()
    return app.exec()


if __name__ == "__main__":
    raise SystemExit(main())

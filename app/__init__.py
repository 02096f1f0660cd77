"""specdec-playground GUI (PySide6 + pyqtgraph). Imports specdec_core; never the reverse."""

"""DFlash block drafters: the model (draft.py) and its published layouts (formats.py)."""

"""Drafters, one module per algorithm; chosen by name from `specdec_core.run.methods`."""

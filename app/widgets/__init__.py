"""Widgets of the playground window, one per module; none of them talks to the engine."""

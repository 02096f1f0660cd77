"""Starting a run: the method registry, the prompts, the specs on this machine, policy profiles,
and the one way a run is started (runner.start)."""

"""What one decoding step is made of: the settings (config.py), the events a run yields
(events.py), the distributions (sampling.py), a drafter's proposal (proposal.py), the target's
forward and its cache, and what its forwards cost."""

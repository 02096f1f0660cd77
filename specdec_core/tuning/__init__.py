"""Tuning: sweeps over settings, Tune's choice of k, tree size or a method parameter, and policy
profiles per kind of request."""

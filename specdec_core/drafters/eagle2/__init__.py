"""EAGLE-2: the drafter (drafter.py) composes the tree's sizing, growth (greedy or sampled) and a
post-processing (lookup or suffix merged in)."""

"""The decode loop (decode.py): one generator for every method; the drafter protocol it calls
(drafter.py) and adaptive draft length (adaptive.py)."""

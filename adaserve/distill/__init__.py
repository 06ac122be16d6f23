"""Distilling the draft model from the target's own outputs (seed 004): `adaserve distill-draft`."""

"""``tiered bench ...``: measurements as ratios against the physical limit and the peer."""

COLD_IO = ("direct", "fsync")
"""How ``bench adjoint``'s tiered and bare-ring rows keep files out of the page cache beyond
memory (here, not in :mod:`tiered.bench.adjoint`: the CLI's parser reads it at start-up)."""

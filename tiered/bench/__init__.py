"""``tiered bench ...``: measurements as ratios against the physical limit and the peer."""

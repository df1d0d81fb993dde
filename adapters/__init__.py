"""Adapters that present a :class:`tiered.Cache` in each user's own idiom."""

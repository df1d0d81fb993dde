"""Test suites that every tier, eviction policy and predictor must pass (needs pytest).

Subclass one in a ``Test*`` class and say how to build the object under test::

    from tiered.testing import PersistentTierTests

    class TestMyTier(PersistentTierTests):
        def make_tier(self, path, capacity=None):
            return MyTier(path, capacity=capacity)

The suites use only the public contracts (:class:`~tiered.tiers.persistent.PersistentTier`,
:class:`~tiered.tiers.base.MemoryTier`, :class:`~tiered.policies.EvictionPolicy`,
:class:`~tiered.policies.Predictor`), so a tier or policy written outside tiered runs them
as the built-in ones do.
"""

from tiered.testing.policies import EvictionPolicyTests, PredictorTests
from tiered.testing.tiers import MemoryTierTests, PersistentTierTests

TierTests = PersistentTierTests  # the name the suites are known by

__all__ = ["EvictionPolicyTests", "MemoryTierTests", "PersistentTierTests", "PredictorTests",
           "TierTests"]

"""Hypothesis strategies shared by the property tests."""

from hypothesis import strategies as st

# Every property test draws its arrays from a seeded generator: hypothesis shrinks the seed.
seeds = st.integers(0, 2**32 - 1)

"""How many examples a property test draws.

Each test states the count the whole suite draws, through `examples(n)`; the `quick`
hypothesis profile (`scripts/test --quick` loads it with `--hypothesis-profile=quick`) draws
a quarter of it, and a quarter of hypothesis' default for a test that states none. The
whole suite (the default profile) draws every example the tests state.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

__all__ = ["QUICK", "examples"]

QUICK = "quick"
DEFAULT_EXAMPLES = 100  # hypothesis' default max_examples, the default profile's
# On two workers of a shared 2-core machine a draw or an example can take longer than
# hypothesis' timing checks allow (too_slow: ten inputs in a second; a 200 ms deadline):
# the quick tier checks the properties, the whole suite (default profile) keeps the timings.
settings.register_profile(QUICK, max_examples=DEFAULT_EXAMPLES // 4, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])


def examples(n: int) -> int:
    """`n` under the default profile; under `quick`, the same share of `n` as the profile's
    max_examples is of the default (at least 10, or `n` when that is fewer)."""
    share = settings.default.max_examples / DEFAULT_EXAMPLES
    return n if share >= 1 else min(n, max(10, round(n * share)))

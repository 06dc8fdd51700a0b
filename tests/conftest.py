import os

from hypothesis import HealthCheck, settings

# The property tests run 200 examples each (the CI profile, the default); HYPOTHESIS_PROFILE=dev
# runs 40 for a quicker local loop.
settings.register_profile("ci", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

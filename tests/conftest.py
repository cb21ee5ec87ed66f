"""Shared pytest configuration.

Hypothesis profiles: "ci" (selected when the CI environment variable is set) is
derandomized, so a CI run explores the same examples every time and a failure reproduces;
locally the default profile keeps exploring new examples.
"""
import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
if os.environ.get("CI"):
    settings.load_profile("ci")

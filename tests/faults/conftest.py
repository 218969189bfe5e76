"""Fixtures for the fault-injection tests: the probe tests' process marker."""

from tests.probes.conftest import marker

__all__ = ["marker"]

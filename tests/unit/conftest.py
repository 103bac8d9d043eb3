"""Fixtures of the unit tests."""

from tests.unit.controller_world import started

__all__ = ["started"]

"""Timestamps as the API server writes them (RFC 3339, UTC, to the second) and back.

Rule: standard library only, so that the decision core may use it without the API models'
libraries (pydantic, msgspec).
"""

from __future__ import annotations

import datetime as dt


def parse_time(text: object) -> float | None:
    """An RFC 3339 timestamp as the API server writes it, in seconds; None when absent or bad."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def format_time(seconds: float) -> str:
    """Seconds as an RFC 3339 timestamp in UTC, to the second, as the API server writes them."""
    stamp = dt.datetime.fromtimestamp(seconds, dt.UTC).replace(microsecond=0)
    return stamp.isoformat().replace("+00:00", "Z")

"""Kubernetes resource quantities, parsed in one place.

Rule: every quantity kohort computes with is an integer number of milli-units ("500m" -> 500,
"2" -> 2000, "1Ki" -> 1_024_000), rounded up like the apiserver rounds sub-milli values. The
decision core never sees strings.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, DecimalException
from typing import Final

_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_PATTERN: Final = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))"
    r"(?:(?P<exp>[eE][+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"
)
# The same grammar as an OpenAPI (RE2) pattern, for CRD schemas: a sign is allowed here; the
# CRDs refuse negative values with a separate rule whose message says so.
_NUMBER: Final = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
_SUFFIX: Final = r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]+))?"
QUANTITY_PATTERN: Final = rf"^(\+|-)?{_NUMBER}{_SUFFIX}$"
# The same without a leading '-': for where a CRD cannot afford a CEL rule per value.
NON_NEGATIVE_QUANTITY_PATTERN: Final = rf"^\+?{_NUMBER}{_SUFFIX}$"


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def exact_quantity(value: str | int | float) -> Decimal:
    """Return `value` as an exact number of units, sign kept ("-500m" -> Decimal("-0.5")).

    Accepts what `parse_quantity` accepts; raises QuantityError otherwise. Use it where rounding
    would hide a difference: the sign of "-0.0001", or "1.0002" against "1.0001".
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Decimal(value)
    text = str(value).strip() if isinstance(value, float) else value.strip()
    match = _PATTERN.match(text)
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity (expected e.g. '500m', '2', '16Gi')")
    suffix = match["suffix"] or ""
    try:
        number = Decimal(match["number"])
        if match["exp"]:
            number *= Decimal(10) ** int(match["exp"][1:])
        return number * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])
    except DecimalException as err:  # an exponent beyond what a Decimal holds: "1e9999999"
        raise QuantityError(f"{value!r} is out of range for a quantity") from err


def parse_quantity(value: str | int | float) -> int:
    """Return `value` in milli-units, rounded up.

    Accepts what the apiserver accepts: plain numbers ("2", "0.5"), decimal suffixes ("500m",
    "2k", "1G"), binary suffixes ("16Gi") and exponents ("1e3"). Raises QuantityError otherwise.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value * 1000
    number = exact_quantity(value)
    return int((number * 1000).to_integral_value(rounding=ROUND_CEILING))


def format_quantity(milli: int) -> str:
    """Render milli-units the shortest exact way: 2000 -> "2", 500 -> "500m"."""
    if milli % 1000 == 0:
        return str(milli // 1000)
    return f"{milli}m"


def format_amount(resource: str, milli: int) -> str:
    """Render an amount for a human: GPUs and CPUs as numbers, memory in Gi/Mi where exact."""
    if resource == "memory" and milli % 1000 == 0:
        value = milli // 1000
        for suffix, factor in (("Gi", 2**30), ("Mi", 2**20)):
            if value >= factor and value % factor == 0:
                return f"{value // factor}{suffix}"
        return str(value)
    whole, rest = divmod(milli, 1000)
    if rest == 0:
        return str(whole)
    return f"{milli / 1000:g}"

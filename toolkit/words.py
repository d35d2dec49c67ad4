"""Counts in words, for reports and the notebooks' printed lines."""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``count`` and ``noun``, the noun plural unless the count is 1.

    Parameters
    ----------
    count
        How many (written with thousands separators).
    noun
        The singular noun.
    plural_form
        The plural when it is not ``noun + "s"``.

    Examples
    --------
    >>> plural(1, "practitioner-week"), plural(3, "practitioner-week"), plural(0, "slot")
    ('1 practitioner-week', '3 practitioner-weeks', '0 slots')
    >>> plural(1_234, "entry", "entries")
    '1,234 entries'
    """
    word = noun if count == 1 else (plural_form or f"{noun}s")
    return f"{count:,} {word}"

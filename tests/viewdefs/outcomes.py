"""What a read of pages gives, in a form two reads can be compared by.

``tests/viewdefs/test_fast_read.py`` and ``tests/viewdefs/test_sof_suite.py`` run the
same view over the same hostile pages by two reads and want the same outcome.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

Outcome = tuple[Any, ...]


def outcome(run: Callable[..., Any], *args: Any) -> Outcome:
    """``run(*args)`` as ``("ok", schema, rows, warnings)`` or ``("error", type, message)``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            frame = run(*args)
        except Exception as exc:  # the same error both ways is the point
            return ("error", type(exc).__name__, str(exc))
    said = sorted(str(w.message) for w in caught)
    return ("ok", dict(frame.schema), frame.to_dicts(), said)

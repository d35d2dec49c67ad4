"""pmtk: practice-management API toolkit.

The public names are imported lazily (module ``__getattr__``), so that
``import toolkit`` stays light: Polars, httpx and the mock load only when used.

>>> import toolkit
>>> toolkit.region_for_country("GB")
'eu'
"""

from __future__ import annotations

# ruff: noqa: F401
import os
import sys
from typing import TYPE_CHECKING

from toolkit._lazy import lazy_exports

POLARS_ALLOCATOR_CONF = "dirty_decay_ms:5000,muzzy_decay_ms:5000"
"""The jemalloc options pmtk gives Polars (see :func:`_tune_polars_allocator`)."""


def _tune_polars_allocator() -> None:
    """Let Polars' allocator keep freed pages for 5 s instead of 0.5-1 s.

    Polars' JSON reader allocates and frees a parse tree for every batch of
    pages. With Polars' default decay (``dirty_decay_ms:500,muzzy_decay_ms:1000``)
    those pages go back to the kernel and fault in again for the next batch:
    about a fifth of the flatten time in ``tests/benchmarks`` went to kernel page
    faults (a ``perf`` profile). Polars
    reads ``_RJEM_MALLOC_CONF`` once, when it is first imported, and appends it
    to its own defaults, so this only takes effect when ``toolkit`` is imported
    before ``polars``. It is skipped when ``_RJEM_MALLOC_CONF`` is already set
    (the user's choice wins) or when ``PMTK_POLARS_ALLOCATOR=default``.
    """
    if "polars" in sys.modules or "_RJEM_MALLOC_CONF" in os.environ:
        return
    if os.environ.get("PMTK_POLARS_ALLOCATOR", "").lower() == "default":
        return
    os.environ["_RJEM_MALLOC_CONF"] = POLARS_ALLOCATOR_CONF


_tune_polars_allocator()

if TYPE_CHECKING:  # the names re-exported lazily below, for type checkers
    from toolkit import catalogue, errors
    from toolkit.client import Client, FetchSummary, connect, search_params
    from toolkit.config import region_for_country
    from toolkit.days import local_day
    from toolkit.errors import (
        ApiError,
        ConfigurationError,
        DataValidationError,
        IncompleteResult,
        OutcomeUnknown,
        PmtkError,
        RequestValidationError,
    )
    from toolkit.listing import search_pairs
    from toolkit.schemas import validate
    from toolkit.store import load, sync
    from toolkit.throttle import RetryPolicy
    from toolkit.viewdefs import run_view
    from toolkit.views import flatten, flatten_tables
    from toolkit.webhooks import listen

try:
    from importlib.metadata import PackageNotFoundError, version

    __version__ = version("pmtk-practice")  # the distribution; the import stays `toolkit`
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0+unknown"

_EXPORTS: dict[str, tuple[str, str | None]] = {
    "Client": ("toolkit.client", "Client"),
    "FetchSummary": ("toolkit.client", "FetchSummary"),
    "connect": ("toolkit.client", "connect"),
    "search_params": ("toolkit.client", "search_params"),
    "search_pairs": ("toolkit.listing", "search_pairs"),
    "local_day": ("toolkit.days", "local_day"),
    "region_for_country": ("toolkit.config", "region_for_country"),
    "RetryPolicy": ("toolkit.throttle", "RetryPolicy"),
    "flatten": ("toolkit.views", "flatten"),
    "flatten_tables": ("toolkit.views", "flatten_tables"),
    "run_view": ("toolkit.viewdefs", "run_view"),
    "validate": ("toolkit.schemas", "validate"),
    "load": ("toolkit.store", "load"),
    "sync": ("toolkit.store", "sync"),
    "listen": ("toolkit.webhooks", "listen"),
    "errors": ("toolkit.errors", None),
    "catalogue": ("toolkit.catalogue", None),
    "PmtkError": ("toolkit.errors", "PmtkError"),
    "ApiError": ("toolkit.errors", "ApiError"),
    "ConfigurationError": ("toolkit.errors", "ConfigurationError"),
    "DataValidationError": ("toolkit.errors", "DataValidationError"),
    "IncompleteResult": ("toolkit.errors", "IncompleteResult"),
    "OutcomeUnknown": ("toolkit.errors", "OutcomeUnknown"),
    "RequestValidationError": ("toolkit.errors", "RequestValidationError"),
}

__all__ = sorted([*_EXPORTS, "__version__"])


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

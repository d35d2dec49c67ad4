"""The public names of ``toolkit``: pinned, importable and documented.

The pinned list itself lives once, in ``tests/packaging/test_public_api.py``
(``PUBLIC_API``); these tests add what that pin does not check: the order, that
every name imports in a fresh interpreter, that each is documented, and that the
names the request-pipeline refactor moved are still importable where they were.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import types

import pytest

import toolkit
from tests.packaging.test_public_api import PUBLIC_API


def test_toolkit_all_is_exactly_the_pinned_sorted_list() -> None:
    # A name added to or removed from toolkit._EXPORTS fails here until PUBLIC_API says so.
    assert toolkit.__all__ == PUBLIC_API
    assert sorted(PUBLIC_API) == PUBLIC_API


def test_every_public_name_imports_in_a_fresh_interpreter() -> None:
    # A fresh process: an earlier test cannot have imported the module behind a lazy name.
    names = ", ".join(toolkit.__all__)
    code = f"from toolkit import {names}; print('ok')"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def _own_docstring(obj: object) -> str:
    """The object's own docstring; a dataclass's generated signature does not count."""
    doc = obj.__doc__ or ""
    if inspect.isclass(obj) and doc.startswith(f"{obj.__name__}("):
        return ""
    return doc.strip()


@pytest.mark.parametrize("name", [n for n in PUBLIC_API if n != "__version__"])
def test_every_public_name_is_documented(name: str) -> None:
    obj = getattr(toolkit, name)
    assert isinstance(obj, type | types.FunctionType | types.ModuleType), (name, type(obj))
    assert _own_docstring(obj), f"toolkit.{name} has no docstring"


def test_version_is_a_release_string() -> None:
    assert isinstance(toolkit.__version__, str)
    assert toolkit.__version__.count(".") >= 1


def test_names_moved_out_of_the_client_still_import_from_their_old_modules() -> None:
    from toolkit import catalogue, client, http, listing, throttle, writes

    assert client.search_params is listing.search_params
    assert client.FetchSummary is toolkit.FetchSummary
    assert client.__all__ == [
        "Client",
        "FetchSummary",
        "connect",
        "region_for_country",
        "search_params",
    ]
    # The API facts the client side used to repeat are the catalogue's, under their old names.
    assert writes.CREATABLE is catalogue.CREATE_PATHS
    assert writes.PATCHABLE is catalogue.PATCHABLE
    assert writes.NOT_PATCHABLE is catalogue.PATCH_ANSWERS_EMPTY_405
    assert throttle.WINDOW == catalogue.RATE_LIMIT_WINDOW_SECONDS
    assert {"GuardedTransport", "Origin", "safe_id", "Pipeline"} <= set(http.__all__)

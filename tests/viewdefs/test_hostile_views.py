"""Hostile views are refused at load time, as ViewDefinitionError naming the place.

Each case here raised something else before (a raw Polars error, RecursionError,
TypeError) or only after the data had been read.
"""

from __future__ import annotations

from typing import Any

import pytest

from toolkit.errors import PmtkError, ViewDefinitionError
from toolkit.viewdefs import load_view, run_view


def _view(*selects: dict[str, Any]) -> dict[str, Any]:
    return {"resource": "Patient", "select": list(selects)}


def test_union_branches_that_differ_in_collection_are_refused() -> None:
    # one branch a collection column, the other a single value: Polars raised
    # "cannot cast List type" while running it
    view = _view(
        {
            "unionAll": [
                {"column": [{"name": "v", "path": "name.family", "collection": True}]},
                {"column": [{"name": "v", "path": "id"}]},
            ]
        }
    )
    with pytest.raises(ViewDefinitionError) as caught:
        load_view(view)
    assert caught.value.path == "select[0].unionAll[1]"
    assert isinstance(caught.value, PmtkError)
    with pytest.raises(ViewDefinitionError):
        run_view(view, [{"resourceType": "Patient", "id": "p1"}])

"""The two view engines agree on the mock's data, at every scale and in both shapes.

Before the declared reader (``toolkit.views``) can give way to the ViewDefinition runner
(issue 36, "one view engine"), the runner must give its tables: every declared table,
exported as a ViewDefinition (``pmtk views export``), is run by the runner over the
mock's own pages and compared row by row with the reader's table (what
``tests/viewdefs/test_declared_export.py`` compares: every column but ``extra`` and
``invalid``, which have no FHIRPath form).

The pages are the mock's records as it stores them, in pages of 100, built in process
(the HTTP path is ``test_mock_pages_over_http_give_the_reader_tables``). By default the
small scale runs in both shapes; ``PMTK_AGREE_SCALES=small,medium,large`` runs the
others too (medium ~25 s a shape, large several minutes): see docs/testing.md.
"""

from __future__ import annotations

import os

import pytest

from tests.viewdefs.test_declared_export import _assert_same
from toolkit import catalogue
from toolkit.mock.state import MockOptions, MockState

SCALES = [s for s in os.environ.get("PMTK_AGREE_SCALES", "small").split(",") if s]


def _pages(state: MockState, resource_type: str, size: int = 100) -> list[bytes]:
    records = state.store[resource_type]
    order = list(records.order())
    return [
        b'{"resourceType":"Bundle","type":"searchset","entry":['
        + b",".join(b'{"resource":' + records.raw(i) + b"}" for i in order[at : at + size])
        + b"]}"
        for at in range(0, len(order), size)
    ]


@pytest.mark.parametrize("shapes", ["live", "spec"])
@pytest.mark.parametrize("scale", SCALES)
def test_the_runner_gives_the_reader_tables_on_the_mock(scale: str, shapes: str) -> None:
    state = MockState(MockOptions(scale=scale, shapes=shapes))
    compared: dict[str, int] = {}
    for resource_type in catalogue.LISTED_RESOURCES:
        pages = _pages(state, resource_type)
        assert pages, resource_type
        compared[resource_type] = _assert_same(resource_type, pages)
    # every listed type was compared on rows, not on empty tables
    assert all(compared.values()), compared

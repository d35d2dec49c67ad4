"""A data family registered with ``@family`` is drawn, served and checked like the others."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import api_client
from tests.mock.test_data_rules import contract_problems
from toolkit.mock import serve
from toolkit.mock.data import generate
from toolkit.mock.data.base import FAMILIES, Drawing, family, meta, past

NAME = "zz-test-other-organizations"


def _add_others(drawing: Drawing) -> None:
    """Three more "other" organizations, each with a name drawn from the family's own rng."""
    orgs = drawing.store.collection("Organization")
    for k in range(3):
        oid = f"OG-{99001 + k}"
        updated = past(drawing.rng, 10, 20)
        name = f"Test organisation {drawing.rng.randrange(1000)}"
        record = {"resourceType": "Organization", "id": oid, "meta": meta(updated), "name": name}
        orgs.add(oid, record, updated=updated)


@pytest.fixture
def registered() -> Iterator[None]:
    family(NAME)(_add_others)
    try:
        yield
    finally:
        FAMILIES.pop(NAME)


def test_a_registered_family_is_drawn_deterministically_and_passes_the_rules(
    registered: None,
) -> None:
    def names(seed: int) -> list[str]:
        data = generate(seed, "small")
        assert contract_problems(data) == []
        orgs = data.store["Organization"]
        return [orgs.record(orgs.pos[f"OG-{i}"])["name"] for i in (99001, 99002, 99003)]

    assert names(0) == names(0) != names(1)


def test_a_registered_family_is_served_over_http(registered: None) -> None:
    with serve() as dep, api_client(dep) as client:
        record = client.get("Organization/OG-99002").json()
        listed = client.get("Organization", params={"_id": "OG-99001,OG-99003"}).json()
    assert record["name"].startswith("Test organisation ")
    assert listed["total"] == 2


def test_a_family_name_is_registered_once(registered: None) -> None:
    with pytest.raises(ValueError, match="already registered"):
        family(NAME)(_add_others)


def test_without_registration_nothing_is_added() -> None:
    assert NAME not in FAMILIES
    assert "OG-99001" not in generate(0, "small").store["Organization"].pos

"""A name search reads ``name`` in the form the catalogue declares, over real HTTP.

Issue 26: the mock assumed every ``name`` was a HumanName unless the type was
Organization, so a type added by the recipe whose ``name`` is a string (a scratch
``Location``) got a 500 on ``client.frame("Location", name="Site 2")``. The first
test adds that type to a scratch copy of the toolkit exactly as
``docs/architecture.md``'s recipe says (its ``Resource`` and a ``@family`` module)
and searches it through the client. The second puts every form FHIR allows for a
``name`` (a string, a HumanName object, an array of HumanName, a missing or null
name, and a few hostile ones) into a running mock, once under a type that declares
a HumanName and once under one that declares a string, and checks every search
answers 200 with exactly the records whose declared-form name matches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.scratch import add_resource_type, copy_packages, probe
from toolkit.mock import Deployment

LOCATION = """LOCATION = Resource(
    "Location",
    _common(Field("name", "string"), Field("status", "code", enum=("active", "inactive"))),
    id_prefixes=("LO-",),
    source="pmtk",
    doc="A scratch type added by the recipe (tests/mock/test_name_search_forms.py).",
    endpoints=_endpoints("Location", ("list", "List Locations"), source="pmtk"),
    search=("name",),
)"""

FAMILY = """from __future__ import annotations

from toolkit.mock.data.base import Drawing, family, meta, past


@family("locations")
def add_locations(drawing: Drawing) -> None:
    coll = drawing.store.collection("Location")
    for n, name in enumerate(("Site 1", "Site 2", "Site 20 annex", "North site 2")):
        lid = f"LO-{n + 1}"
        updated = past(drawing.rng, 7, 60)
        record = {"resourceType": "Location", "id": lid, "meta": meta(updated),
                  "name": name, "status": "active"}
        coll.add(lid, record, updated=updated)
"""

PROBE = """
import json
from toolkit.client import Client
from toolkit.mock import serve

with serve(seed=0, scale="small") as dep:
    with Client(dep.base_url, dep.client_id, dep.client_secret) as client:
        everything = client.frame("Location")
        found = client.frame("Location", name="Site 2")
print(json.dumps({"all": everything.height, "found": sorted(found.get_column("id"))}))
"""


def test_a_new_type_with_a_string_name_is_searched_by_name_through_the_client(
    tmp_path: Path,
) -> None:
    # the recipe's two files: the Resource and a @family module
    copy_packages(tmp_path, "toolkit")
    add_resource_type(tmp_path, "Location", LOCATION, FAMILY)
    result = probe(tmp_path, PROBE, timeout=120)
    # A prefix search of the whole text or of one word, as for Organization: "Site 20
    # annex" starts with "site 2"; "North site 2" neither starts with it nor has a word
    # that does.
    assert result == {"all": 4, "found": ["LO-2", "LO-3"]}


# -------------------------------------------------------------- every form of a name

FORMS: dict[str, Any] = {
    "text": "Zara Text",
    "human": {"family": "Zedfam", "given": ["Zedgiv", 7], "text": "Zoe Object"},
    "array": [{"family": "Zedarr"}, "Zack Inarray", None, 5, ["Zed nested"]],
    "missing": ...,
    "null": None,
    "number": 42,
    "given-as-string": {"given": "Zedone"},
    "family-as-number": {"family": 7, "given": None},
    "empty": [],
}
"""Record id suffix -> the ``name`` it carries (``...``: no ``name`` key at all)."""


def _plant(dep: Deployment, rtype: str, prefix: str) -> None:
    """Add one record of ``rtype`` per form straight into the running mock's store."""
    coll = dep._state.store[rtype]
    for suffix, name in FORMS.items():
        rid = f"{prefix}{suffix}"
        record: dict[str, Any] = {
            "resourceType": rtype,
            "id": rid,
            "meta": {"lastUpdated": "2026-11-20T00:00:00Z"},
        }
        if name is not ...:
            record["name"] = name
        coll.add(rid, record, updated=1_795_000_000.0)


def _ids(api: httpx.Client, rtype: str, prefix: str, **params: str) -> set[str]:
    response = api.get(rtype, params={**params, "_count": 100})
    assert response.status_code == 200, (params, response.text[:500])
    body = response.json()
    ids = {e["resource"]["id"] for e in body.get("entry", [])}
    assert body["total"] >= len(ids)
    return {i for i in ids if i.startswith(prefix)}


HUMAN = {  # Patient declares a HumanName array: family, given and text all count
    ("name", "Z"): {"text", "human", "array", "given-as-string"},
    ("name", "Zed"): {"human", "array", "given-as-string"},
    ("name:exact", "Zoe Object"): {"human"},
    ("name:contains", "inarr"): {"array"},  # a string item of the array is a text
    ("name:contains", "nest"): set(),  # an array inside the array is no FHIR form
    ("family", "Zed"): {"human", "array"},
    ("family", "Zara"): set(),  # a bare string is the text, not a family
    ("given", "Zed"): {"human", "given-as-string"},
    ("given:exact", "Zedone"): {"given-as-string"},
}
STRING = {  # Organization declares a string: only the text of the name counts
    ("name", "Z"): {"text", "human", "array"},
    ("name", "Zack"): {"array"},  # a string item of the array
    ("name", "Zed"): set(),  # families are not part of a string name; no nested arrays
    ("name:exact", "Zara Text"): {"text"},
    ("name:contains", "obj"): {"human"},  # a HumanName's text is still its text
    ("name", "Zedfam"): set(),  # a family is not part of a string name
}


@pytest.mark.parametrize(
    ("rtype", "prefix", "expected"),
    [("Patient", "zz-", HUMAN), ("Organization", "SP-zz-", STRING)],
)
def test_every_form_of_a_name_is_searched_by_its_declared_form_never_a_500(
    fresh_mock: Deployment,
    fresh_api: httpx.Client,
    rtype: str,
    prefix: str,
    expected: dict[tuple[str, str], set[str]],
) -> None:
    _plant(fresh_mock, rtype, prefix)
    for (param, value), suffixes in expected.items():
        assert _ids(fresh_api, rtype, prefix, **{param: value}) == {prefix + s for s in suffixes}, (
            rtype,
            param,
            value,
        )

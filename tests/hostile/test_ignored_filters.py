"""A filter the server ignores is reported, against servers pmtk did not write.

FHIR's rule (``public-docs-facts.md``, "Shapes seen on the live service"): a server
ignores a search parameter it does not support and leaves it out of the Bundle's
``self`` link. The servers here are written from that rule, not from pmtk's mock: a
small Patient search that supports ``name`` only. Variants: one that follows the
rule, one that ignores a filter but still echoes it (the limit of the check), one
with no ``self`` link, and one that rewrites and reorders what it understood.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import urlencode

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tests.hostile.conftest import SECRET, api_app, serve
from toolkit.client import Client
from toolkit.errors import ConfigurationError, IgnoredFilter, IgnoredFilterWarning, PmtkError

UA = "pmtk-tests (tests@example.invalid)"
PATIENTS = [
    {
        "resourceType": "Patient",
        "id": str(n),
        "meta": {"lastUpdated": "2026-01-01T00:00:00Z"},
        "name": [{"family": family, "given": ["Sam"]}],
        "telecom": [{"system": "email", "value": f"{family.lower()}@example.org"}],
    }
    for n, family in enumerate(("Nguyen", "Smith", "Taylor"), start=1)
]
SUPPORTED = {"name", "_count", "page"}

SelfLink = Callable[[Request, list[tuple[str, str]]], str | None]


def rule_self(request: Request, understood: list[tuple[str, str]]) -> str | None:
    """FHIR's rule: the search as understood, unsupported parameters left out."""
    query = urlencode(understood)
    return f"{request.url.scheme}://{request.url.netloc}{request.url.path}?{query}"


def echo_self(request: Request, understood: list[tuple[str, str]]) -> str | None:
    """Not FHIR's rule: the request echoed whole, ignored parameters included."""
    return str(request.url)


def no_self(request: Request, understood: list[tuple[str, str]]) -> str | None:
    return None


def rewriting_self(request: Request, understood: list[tuple[str, str]]) -> str | None:
    """The rule, with what a server may do: a relative link, the parameters reordered,
    values normalised and ``_count``/``page`` added."""
    pairs = [(k, v.upper()) for k, v in reversed(understood)]
    if not any(k == "_count" for k, _ in pairs):
        pairs.append(("_count", "30"))
    return f"{request.url.path}?{urlencode([*pairs, ('page', '1')])}"


@contextmanager
def fhir_server(make_self: SelfLink) -> Iterator[str]:
    """A Patient search that supports ``name`` only; yields its base url."""

    async def search(request: Request) -> Response:
        understood = [(k, v) for k, v in request.query_params.multi_items() if k in SUPPORTED]
        names = [v.lower() for k, v in understood if k == "name"]
        rows = [
            p
            for p in PATIENTS
            if all(p["name"][0]["family"].lower().startswith(n) for n in names)  # type: ignore[index]
        ]
        body: dict[str, object] = {
            "resourceType": "Bundle",
            "type": "searchset",
            "total": len(rows),
            "link": [],
            "entry": [{"resource": r} for r in rows],
        }
        link = make_self(request, understood)
        if link is not None:
            body["link"] = [{"relation": "self", "url": link}]
        return JSONResponse(body)

    with serve(api_app(search)) as port:
        yield f"http://127.0.0.1:{port}/main"


def client(base: str, **kw: object) -> Client:
    return Client(base, "hostile-client", SECRET, user_agent=UA, progress=False, **kw)  # type: ignore[arg-type]


def test_a_filter_left_out_of_self_raises_before_any_record() -> None:
    with fhir_server(rule_self) as base, client(base) as c:
        with pytest.raises(IgnoredFilter) as caught:
            c.frame("Patient", params={"email": "smith@example.org"})
        assert caught.value.ignored == ["email"]
        assert isinstance(caught.value, PmtkError)
        assert "email" in str(caught.value) and "self link" in str(caught.value)
        # a supported filter passes, and is applied
        assert c.frame("Patient", name="smi")["id"].to_list() == ["2"]
        assert c.last_summary is not None and c.last_summary.filters_checked


def test_warn_goes_on_with_every_row_and_says_which_filter() -> None:
    with fhir_server(rule_self) as base, client(base, ignored_filters="warn") as c:
        with pytest.warns(IgnoredFilterWarning, match="email"):
            frame = c.frame("Patient", params={"email": "smith@example.org"}, name="s")
        assert frame.height == 1  # name= applied
        assert c.last_summary is not None
        assert c.last_summary.ignored_filters == ["email"]
        assert "ignored email" in str(c.last_summary)


def test_one_of_two_repeated_bounds_dropped_is_seen() -> None:
    # name twice, the server keeps both: fine; a second "email" it drops: reported
    with fhir_server(rule_self) as base, client(base) as c:
        assert c.frame("Patient", params=[("name", "s"), ("name", "sm")]).height == 1
        with pytest.raises(IgnoredFilter, match="email"):
            c.frame("Patient", params=[("name", "s"), ("email", "a"), ("email", "b")])


def test_a_rewritten_reordered_self_link_is_not_a_false_alarm() -> None:
    with fhir_server(rewriting_self) as base, client(base) as c:
        assert c.frame("Patient", name="tay")["id"].to_list() == ["3"]
        assert c.last_summary is not None and c.last_summary.filters_checked
        # empty values and paging or shaping parameters are not filters
        assert c.frame("Patient", params={"name": "", "_sort": "-id"}).height == 3


def test_a_server_that_ignores_but_echoes_cannot_be_caught() -> None:
    """The documented limit: the self link is the only evidence a client has."""
    with fhir_server(echo_self) as base, client(base) as c:
        frame = c.frame("Patient", params={"email": "smith@example.org"})
        assert frame.height == 3  # unfiltered, and nothing can tell
        assert c.last_summary is not None and c.last_summary.filters_checked


def test_no_self_link_means_unchecked_not_refused() -> None:
    with fhir_server(no_self) as base, client(base) as c:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            frame = c.frame("Patient", params={"email": "smith@example.org"})
        assert frame.height == 3
        assert c.last_summary is not None and not c.last_summary.filters_checked


def test_ignored_filters_option_is_checked_up_front() -> None:
    with pytest.raises(ConfigurationError, match="ignored_filters"):
        client("http://127.0.0.1:9/main", ignored_filters="ignore")

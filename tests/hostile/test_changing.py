"""Changing collections: records change while a list is walked (issue 10).

The server here is not pmtk's mock: a small Starlette app that serves Patients
in write order (oldest ``meta.lastUpdated`` first, as a live list does), with
``_count``/``page`` paging, ``_lastUpdated`` bounds (repeatable, ANDed), a
``total`` and a ``Date`` header. After it has served page 1 it "edits" a record
of page 1: that record moves to the end (read twice) and the first record of
page 2 slides back into page 1 (never read): a duplicate and a gap.
"""

from __future__ import annotations

import email.utils
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tests.hostile.conftest import SECRET, api_app, serve
from toolkit.client import Client
from toolkit.errors import IncompleteResult
from toolkit.store import load, sync

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Changing:
    """A collection that edits ``victims`` right after page ``after_page`` is served."""

    def __init__(self, n: int, *, victims: list[str], after_page: int = 1) -> None:
        self.records: list[dict[str, Any]] = [
            {
                "resourceType": "Patient",
                "id": f"p{i:03d}",
                "gender": "female",
                "meta": {"lastUpdated": (T0 + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%SZ")},
            }
            for i in range(n)
        ]
        self.victims = victims
        self.after_page = after_page
        self.list_requests = 0
        self.queries: list[str] = []
        self.lock = threading.Lock()
        self.fired = False
        self.now = datetime.now(UTC).replace(microsecond=0)

    def _edit(self) -> None:
        self.now += timedelta(seconds=5)
        for rid in self.victims:
            rec = next(r for r in self.records if r["id"] == rid)
            self.records.remove(rec)
            rec = {
                **rec,
                "gender": "male",
                "meta": {"lastUpdated": self.now.strftime("%Y-%m-%dT%H:%M:%SZ")},
            }
            self.records.append(rec)

    async def handle(self, request: Request) -> Response:
        with self.lock:
            q = request.query_params
            self.queries.append(str(q))
            self.list_requests += 1
            rows = self.records
            for bound in q.getlist("_lastUpdated"):
                op, value = bound[:2], datetime.fromisoformat(bound[2:])

                def keep(r: dict[str, Any], op: str = op, value: datetime = value) -> bool:
                    when = datetime.fromisoformat(r["meta"]["lastUpdated"])
                    return {
                        "ge": when >= value,
                        "gt": when > value,
                        "lt": when < value,
                        "le": when <= value,
                    }[op]

                rows = [r for r in rows if keep(r)]
            count = int(q.get("_count", "30"))
            page = int(q.get("page", "1"))
            chunk = rows[(page - 1) * count : page * count]
            body: dict[str, Any] = {
                "resourceType": "Bundle",
                "type": "searchset",
                "total": len(rows),
                "entry": [{"resource": r} for r in chunk],
                "link": [],
            }
            if page * count < len(rows):
                params = {k: v for k, v in q.multi_items() if k != "page"}
                extra = "&".join(f"{k}={v}" for k, v in params.items())
                body["link"].append({"relation": "next", "url": f"Patient?{extra}&page={page + 1}"})
            date = email.utils.format_datetime(self.now, usegmt=True)
            unfiltered = not q.getlist("_lastUpdated")
            if unfiltered and page == self.after_page and not self.fired:
                self.fired = True
                self._edit()
            return JSONResponse(body, headers={"date": date})


def _client(port: int) -> Client:
    return Client(
        f"http://127.0.0.1:{port}/main", "c", SECRET, progress=False, requests_per_minute=None
    )


def test_frame_returns_every_record_once_newest_version_while_records_change() -> None:
    server = Changing(250, victims=["p010"])
    with serve(api_app(server.handle)) as port, _client(port) as client:
        df = client.frame("Patient")
        summary = client.last_summary
    assert df.height == 250
    assert df["id"].n_unique() == 250
    assert df.filter(pl.col("id") == "p010")["gender"].item() == "male"  # newest version
    assert summary is not None and summary.complete and summary.recovered
    # cost: 3 pages, then changed-since (1), a count (1), the fill walk (3), again (1 + 1)
    print(f"recovery: {summary.requests} requests for a 3-page walk")
    assert summary.requests <= 3 + 1 + 1 + 3 + 1 + 1
    assert any("_lastUpdated=ge" in q for q in server.queries)


def test_records_and_frames_dedupe_and_pages_document_the_extra_pages() -> None:
    server = Changing(250, victims=["p005", "p050"])
    with serve(api_app(server.handle)) as port, _client(port) as client:
        recs = list(client.records("Patient"))
        assert sorted(r["id"] for r in recs) == [f"p{i:03d}" for i in range(250)]
        server.fired = False
        tables = client.frames("Patient")
        assert tables["Patient"]["id"].n_unique() == tables["Patient"].height == 250
    server = Changing(250, victims=["p005"])
    with serve(api_app(server.handle)) as port, _client(port) as client:
        raw = list(client.pages("Patient"))
    # the walk's three pages, then the recovery pages; p005 is in several of
    # them, and only the first (page 1) holds the old version: newest wins
    assert len(raw) > 3
    holding = [i for i, page in enumerate(raw) if b'"id":"p005"' in page]
    assert holding[0] == 0 and len(holding) >= 2
    versions = [orjson.loads(raw[i])["entry"] for i in holding]
    genders = [
        next(e["resource"]["gender"] for e in v if e["resource"]["id"] == "p005") for v in versions
    ]
    assert genders == ["female"] + ["male"] * (len(genders) - 1)


def test_a_clean_walk_costs_no_extra_request() -> None:
    server = Changing(250, victims=[])
    server.fired = True
    with serve(api_app(server.handle)) as port, _client(port) as client:
        assert client.frame("Patient").height == 250
        assert client.last_summary is not None
        assert client.last_summary.requests == 3 and not client.last_summary.recovered


def test_recovery_that_cannot_make_it_whole_raises() -> None:
    server = Changing(250, victims=["p010"])
    original = server.handle

    async def lying(request: Request) -> Response:
        # the fill walk of unchanged records never returns p100 (the slid record)
        response = await original(request)
        if any(b.startswith("lt") for b in request.query_params.getlist("_lastUpdated")):
            body = orjson.loads(bytes(response.body))
            body["entry"] = [e for e in body["entry"] if e["resource"]["id"] != "p100"]
            return JSONResponse(body)
        return response

    with (
        serve(api_app(lying)) as port,
        _client(port) as client,
        pytest.raises(IncompleteResult, match="still lacks 1 unchanged record"),
    ):
        client.frame("Patient")


def test_store_sync_during_changes_completes_and_stores_every_record_once(tmp_path: Path) -> None:
    server = Changing(250, victims=["p010"])
    with serve(api_app(server.handle)) as port, _client(port) as client:
        result = sync(client, tmp_path / "store", resources=["Patient"], progress=False)
    stored = load("Patient", tmp_path / "store")
    assert stored.height == 250 and stored["id"].n_unique() == 250
    assert stored.filter(pl.col("id") == "p010")["gender"].item() == "male"
    assert result["Patient"].rows["Patient"] == 250

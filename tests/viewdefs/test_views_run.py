"""``pmtk views run``: a view over a deployment (the mock over loopback HTTP) or a store.

The expected rows come from the mock's raw JSON, walked by hand with ``httpx``
(``next`` links followed, nothing of pmtk's reader involved), and the participant
rows are made from it in plain Python as the view says.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.conftest import api_client
from toolkit.cli import app
from toolkit.client import Client
from toolkit.mock import Deployment
from toolkit.store import sync

PMTK = Path(sys.executable).parent / "pmtk"

VIEW: dict[str, Any] = {
    "resourceType": "ViewDefinition",
    "name": "participants",
    "resource": "Appointment",
    "select": [
        {"column": [{"name": "id", "path": "id", "type": "id"}]},
        {
            "forEachOrNull": "participant",
            "column": [
                {"name": "index", "path": "%rowIndex", "type": "integer"},
                {"name": "actor", "path": "actor.reference", "type": "string"},
            ],
        },
    ],
}


def _records(dep: Deployment, resource_type: str) -> list[dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    with api_client(dep) as http:
        url: str | None = f"{resource_type}?_count=100"
        while url:
            bundle = http.get(url).raise_for_status().json()
            out.update({e["resource"]["id"]: e["resource"] for e in bundle.get("entry", [])})
            url = next((x["url"] for x in bundle.get("link", []) if x["relation"] == "next"), None)
    return list(out.values())


def _expected(records: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for rec in records:
        parts = [p for p in rec.get("participant") or [] if p is not None]
        if not parts:
            rows.append((rec["id"], 0, None))
        for i, part in enumerate(parts):
            rows.append((rec["id"], i, (part.get("actor") or {}).get("reference")))
    return Counter(rows)


def _counted(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter((r["id"], r["index"], r["actor"]) for r in rows)


def _updated(rec: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(rec["meta"]["lastUpdated"].replace("Z", "+00:00"))


@pytest.fixture(scope="module")
def appointments(mock_deployment: Deployment) -> list[dict[str, Any]]:
    mock_deployment.reset_rate_limit()
    return _records(mock_deployment, "Appointment")


@pytest.fixture(scope="module")
def store(mock_deployment: Deployment, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("views-run") / "store"
    mock_deployment.reset_rate_limit()
    with Client(
        mock_deployment.base_url,
        mock_deployment.client_id,
        mock_deployment.client_secret,
        progress=False,
    ) as client:
        sync(client, out, resources=["Appointment"], progress=False)
    return out


@pytest.fixture
def view_file(tmp_path: Path) -> Path:
    path = tmp_path / "participants.json"
    path.write_text(json.dumps(VIEW))
    return path


def _deployment_args(dep: Deployment) -> list[str]:
    return [
        "--base-url",
        dep.base_url,
        "--client-id",
        dep.client_id,
        "--client-secret",
        dep.client_secret,
    ]


def test_over_the_mock_by_http_the_rows_are_the_views(
    mock_deployment: Deployment, appointments: list[dict[str, Any]], view_file: Path
) -> None:
    mock_deployment.reset_rate_limit()
    args = [
        "views",
        "run",
        str(view_file),
        "--format",
        "ndjson",
        *_deployment_args(mock_deployment),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines() if line]
    assert _counted(rows) == _expected(appointments)
    assert mock_deployment.client_secret not in result.output


def test_over_a_store_every_format_gives_the_same_rows(
    store: Path, appointments: list[dict[str, Any]], view_file: Path, tmp_path: Path
) -> None:
    expected = _expected(appointments)
    for fmt in ("csv", "ndjson", "json", "parquet"):
        out = tmp_path / f"rows.{fmt}"
        args = ["views", "run", str(view_file), "--store", str(store), "-f", fmt, "-o", str(out)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        if fmt == "csv":
            frame = pl.read_csv(out, schema_overrides={"id": pl.String, "actor": pl.String})
        elif fmt == "ndjson":
            frame = pl.read_ndjson(out)
        elif fmt == "json":
            frame = pl.DataFrame(json.loads(out.read_text()))
        else:
            frame = pl.read_parquet(out)
        assert frame.columns == ["id", "index", "actor"]
        assert _counted(frame.to_dicts()) == expected, fmt
        assert f"{frame.height} row(s)" in result.stderr


def test_since_keeps_the_records_updated_after_it_by_store_and_by_http(
    mock_deployment: Deployment, store: Path, appointments: list[dict[str, Any]], view_file: Path
) -> None:
    stamps = sorted(_updated(r) for r in appointments)
    since = stamps[len(stamps) // 2]
    newer = [r for r in appointments if _updated(r) > since]
    assert 0 < len(newer) < len(appointments)
    text = since.isoformat().replace("+00:00", "Z")
    mock_deployment.reset_rate_limit()
    for source in (["--store", str(store)], _deployment_args(mock_deployment)):
        args = ["views", "run", str(view_file), "-f", "ndjson", "--since", text, *source]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in result.stdout.splitlines() if line]
        assert _counted(rows) == _expected(newer), source[0]


def test_limit_gives_the_first_rows(store: Path, view_file: Path) -> None:
    args = ["views", "run", str(view_file), "--store", str(store), "-f", "ndjson"]
    whole = CliRunner().invoke(app, args).stdout.splitlines()
    limited = CliRunner().invoke(app, [*args, "--limit", "7"])
    assert limited.exit_code == 0
    assert limited.stdout.splitlines() == whole[:7]
    assert CliRunner().invoke(app, [*args, "--limit", "0"]).stdout == ""


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            lambda v: v["select"][1].update(
                forEachOrNull="participant.where(actor.matches('(?=x)'))"
            ),
            "regular expression",
        ),
        (lambda v: v.update(resource="appointment"), "resource"),
        (
            lambda v: v["select"][0]["column"][0].update(path="(" * 3000 + "id" + ")" * 3000),
            "nests deeper",
        ),
    ],
    ids=["look-ahead", "resource", "deep"],
)
def test_a_bad_view_exits_2_before_anything(
    change: Any, words: str, tmp_path: Path, store: Path
) -> None:
    view = json.loads(json.dumps(VIEW))
    change(view)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(view))
    out = tmp_path / "rows.csv"
    # a base URL nothing listens on: a request would fail otherwise than exit 2
    for source in (["--store", str(store)], ["--base-url", "http://127.0.0.1:9"]):
        result = CliRunner().invoke(app, ["views", "run", str(bad), "-o", str(out), *source])
        assert result.exit_code == 2, result.output
        assert words in result.stderr
        assert "Traceback" not in result.output
        assert not out.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--format", "xlsx"],
        ["--limit", "-1"],
        ["--since", "yesterday"],
        ["--store", "/nonexistent/store"],
        ["--store", "STORE", "--base-url", "http://127.0.0.1:9"],
        ["-o", "/nonexistent/dir/rows.csv"],
    ],
)
def test_bad_options_exit_2(args: list[str], view_file: Path, store: Path) -> None:
    args = [str(store) if a == "STORE" else a for a in args]
    result = CliRunner().invoke(app, ["views", "run", str(view_file), *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


def test_a_store_without_the_resource_is_refused(
    view_file: Path, store: Path, tmp_path: Path
) -> None:
    view = {**VIEW, "resource": "Invoice"}
    path = tmp_path / "invoices.json"
    path.write_text(json.dumps(view))
    result = CliRunner().invoke(app, ["views", "run", str(path), "--store", str(store)])
    assert result.exit_code == 2, result.output
    assert "Invoice" in result.stderr


def test_a_reader_that_stops_early_ends_it_cleanly(store: Path, view_file: Path) -> None:
    # `pmtk views run v.json --format csv | head -1`: the pipe closes after one line
    env = {k: v for k, v in os.environ.items() if not k.startswith("PM_")}
    with subprocess.Popen(
        [str(PMTK), "views", "run", str(view_file), "--store", str(store), "--format", "csv"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as child:
        assert child.stdout is not None and child.stderr is not None
        first = child.stdout.readline()
        child.stdout.close()
        errors = child.stderr.read().decode()
        code = child.wait(timeout=120)
    assert first == b"id,index,actor\n"
    assert "Traceback" not in errors and "BrokenPipe" not in errors, errors
    assert code == 0, errors
    # the whole output is larger than a pipe's buffer, so the pipe did break
    whole = CliRunner().invoke(app, ["views", "run", str(view_file), "--store", str(store)])
    assert len(whole.stdout.encode()) > 65_536


def test_quiet_prints_only_the_rows(store: Path, view_file: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["views", "run", str(view_file), "--store", str(store), "-q", "--limit", "1", "-f", "json"],
    )
    assert result.exit_code == 0
    assert result.stderr == ""
    assert len(json.loads(io.StringIO(result.stdout).read())) == 1


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_refused_credentials_exit_2_and_leave_the_output_as_it_was(
    mock_deployment: Deployment, view_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "rows.csv"
    out.write_text("old rows\n")
    secret = "not-the-secret-" + "x" * 12
    args = ["views", "run", str(view_file), "-o", str(out), "--base-url", mock_deployment.base_url]
    args += ["--client-id", mock_deployment.client_id, "--client-secret", secret]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert secret not in result.output
    assert out.read_text() == "old rows\n"
    assert _listing(tmp_path) == ["participants.json", "rows.csv"]


def test_an_unreachable_deployment_exits_1_and_leaves_the_output_as_it_was(
    view_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "rows.csv"
    out.write_text("old rows\n")
    args = ["views", "run", str(view_file), "-o", str(out), "--base-url", "http://127.0.0.1:9/main"]
    result = CliRunner().invoke(app, [*args, "--client-id", "a", "--client-secret", "b"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert out.read_text() == "old rows\n"
    assert _listing(tmp_path) == ["participants.json", "rows.csv"]


def test_a_failed_write_exits_4_and_leaves_neither_half_a_file_nor_a_temporary_one(
    store: Path, view_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolkit.viewdefs import run_command

    out = tmp_path / "rows.csv"
    out.write_text("old rows\n")

    def full(*_: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_command.os, "replace", full)
    args = ["views", "run", str(view_file), "--store", str(store), "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 4, result.output
    assert "No space left on device" in result.stderr
    assert out.read_text() == "old rows\n"
    assert _listing(tmp_path) == ["participants.json", "rows.csv"]


def test_a_damaged_store_file_exits_3_and_writes_nothing(
    store: Path, view_file: Path, tmp_path: Path
) -> None:
    import shutil

    from toolkit.store.raw import raw_table

    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    raw = copy / manifest["resources"]["Appointment"]["tables"][raw_table("Appointment")]["path"]
    data = bytearray(raw.read_bytes())
    data[len(data) // 2] ^= 0xFF
    raw.write_bytes(bytes(data))
    out = tmp_path / "rows.csv"
    args = ["views", "run", str(view_file), "--store", str(copy), "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output
    assert not out.exists()


def test_on_a_terminal_a_spinner_runs_and_the_status_line_ends_it(
    store: Path, view_file: Path, tmp_path: Path
) -> None:
    pexpect = pytest.importorskip("pexpect")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PM_", "NO_COLOR"))}
    env.update(TERM="xterm-256color", COLUMNS="80", LINES="24")
    out = tmp_path / "rows.csv"
    args = ["views", "run", str(view_file), "--store", str(store), "-o", str(out)]
    child = pexpect.spawn(
        str(PMTK), args, env=env, dimensions=(24, 80), encoding="utf-8", timeout=120
    )
    child.expect(pexpect.EOF)
    shown = child.before or ""
    child.close()
    assert child.exitstatus == 0, shown
    assert "\x1b[" in shown and "running the view" in shown, "a live status on a terminal"
    assert "view participants:" in shown and "row(s)" in shown
    assert out.read_text().startswith("id,index,actor\n")

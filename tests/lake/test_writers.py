"""Several writers at once, as separate processes (standing in for separate machines),
into a local lake and into an S3-compatible server started on loopback (moto)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest

from tests.lake.conftest import ground_truth
from toolkit import lake
from toolkit.mock import serve

RESOURCES = ["Organization", "Referral"]  # each has child tables; small enough for 2 cores
CLI = "from toolkit.cli import app; app()"


def _start_sync(dep: Any, where: str, name: str, extra_env: dict[str, str] | None = None) -> Any:
    env = {
        **os.environ,
        "PM_BASE_URL": dep.base_url,
        "PM_CLIENT_ID": dep.client_id,
        "PM_CLIENT_SECRET": dep.client_secret,
        **(extra_env or {}),
    }
    args = ["sync", "--out", where, "--deployment", name, "--output", "json"]
    for r in RESOURCES:
        args += ["-r", r]
    return subprocess.Popen(
        [sys.executable, "-c", CLI, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: Any) -> tuple[int, str]:
    out, err = proc.communicate(timeout=240)
    return proc.returncode, out + err


def _check(frame_of: Any, name: str, dep: Any) -> None:
    for resource in RESOURCES:
        truth = ground_truth(dep, resource)
        raw = frame_of(f"_raw_{resource}").filter(pl.col("deployment") == name)
        assert raw["id"].n_unique() == raw.height, f"{name}/{resource}: duplicates"
        assert dict(zip(raw["id"], raw["last_updated"], strict=True)) == truth
        main = frame_of(resource).filter(pl.col("deployment") == name)
        assert sorted(main["id"].to_list()) == sorted(truth)


def test_three_deployments_sync_at_once_into_one_lake(tmp_path: Path) -> None:
    where = str(tmp_path / "lake")
    with (
        serve(seed=0, scale="small") as a,
        serve(seed=1, scale="small") as b,
        serve(seed=2, scale="small") as c,
    ):
        procs = {
            name: _start_sync(dep, where, name)
            for name, dep in (("north", a), ("south", b), ("west", c))
        }
        results = {name: _finish(p) for name, p in procs.items()}
        for name, (code, text) in results.items():
            assert code == 0, f"{name}: {text}"

        def frame_of(table: str) -> pl.DataFrame:
            return pl.read_delta(f"{where}/tables/{table}")

        for name, dep in (("north", a), ("south", b), ("west", c)):
            _check(frame_of, name, dep)
    assert lake.verify(where).ok


def test_two_writers_of_one_deployment_serialise_and_lose_nothing(tmp_path: Path) -> None:
    where = str(tmp_path / "lake")
    with serve(seed=0, scale="small") as a:
        first, second = _start_sync(a, where, "north"), _start_sync(a, where, "north")
        results = [_finish(first), _finish(second)]
        for code, text in results:
            assert code == 0, text

        def frame_of(table: str) -> pl.DataFrame:
            return pl.read_delta(f"{where}/tables/{table}")

        _check(frame_of, "north", a)
        history = lake.history(where, "north")
        per = history.group_by("resource").agg(pl.col("seq").sort())
        for seqs in per["seq"].to_list():
            assert seqs == list(range(1, len(seqs) + 1))  # every commit moved the pin once
        assert lake.load("Referral", where)["id"].n_unique() == len(ground_truth(a, "Referral"))
    assert lake.verify(where).ok


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def s3_server() -> Iterator[dict[str, str]]:
    """An S3-compatible server (moto) on loopback, with a bucket ``lake``."""
    port = _free_port()
    moto = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen(
        [str(moto), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(endpoint, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        httpx.put(f"{endpoint}/lake", timeout=5).raise_for_status()
        yield {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "test-key",
            "AWS_SECRET_ACCESS_KEY": "test-secret",
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }
    finally:
        proc.terminate()
        proc.wait(10)


def test_two_practices_at_once_into_a_lake_on_s3(s3_server: dict[str, str]) -> None:
    where = "s3://lake/practices"
    with serve(seed=0, scale="small") as a, serve(seed=1, scale="small") as b:
        procs = [
            _start_sync(a, where, "north", s3_server),
            _start_sync(b, where, "south", s3_server),
        ]
        for proc in procs:
            code, text = _finish(proc)
            assert code == 0, text
            assert "test-secret" not in text

        def frame_of(table: str) -> pl.DataFrame:
            return pl.read_delta(f"{where}/tables/{table}", storage_options=s3_server)

        _check(frame_of, "north", a)
        _check(frame_of, "south", b)
        loaded = lake.load("Referral", where, deployment="south", storage_options=s3_server)
        assert loaded.height == len(ground_truth(b, "Referral"))
    report = lake.verify(where, storage_options=s3_server)
    assert report.ok and report.files > 0, report.problems

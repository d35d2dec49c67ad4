"""The public surface a user (and a type checker) relies on: pinned, so a change is a decision."""

from __future__ import annotations

import importlib.resources
import subprocess
import sys
import tomllib
from pathlib import Path

import toolkit

ROOT = Path(__file__).resolve().parents[2]

PUBLIC_API = [
    "ApiError",
    "Client",
    "ConfigurationError",
    "DataValidationError",
    "FetchSummary",
    "IncompleteResult",
    "OutcomeUnknown",
    "PmtkError",
    "RequestValidationError",
    "RetryPolicy",
    "__version__",
    "catalogue",
    "connect",
    "errors",
    "flatten",
    "flatten_tables",
    "listen",
    "load",
    "local_day",
    "region_for_country",
    "run_view",
    "search_pairs",
    "search_params",
    "sync",
    "validate",
]


def test_toolkit_all_is_pinned() -> None:
    assert sorted(toolkit.__all__) == PUBLIC_API


def test_every_public_name_resolves() -> None:
    for name in toolkit.__all__:
        assert getattr(toolkit, name) is not None, name


def test_packages_are_marked_typed_for_downstream_mypy() -> None:
    for package in ("toolkit", "contracts"):
        assert importlib.resources.files(package).joinpath("py.typed").is_file(), package


def test_version_matches_the_project_metadata() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert toolkit.__version__ == project["version"]
    pmtk = Path(sys.executable).parent / "pmtk"  # the console script `uv run pmtk` runs
    out = subprocess.run(
        [str(pmtk), "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == f"pmtk {project['version']}"


def test_dev_tools_are_not_installed_by_a_plain_uv_run() -> None:
    # `uv run pmtk check` syncs the default groups: they must not pull in JupyterLab or mypy.
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    groups = data["dependency-groups"]
    default = data["tool"]["uv"]["default-groups"]
    names: set[str] = set()
    for group in default:
        for item in groups[group]:
            if isinstance(item, str):
                names.add(item.split(">")[0].split("=")[0].split("[")[0].strip().lower())
    assert not names & {"jupyterlab", "mypy", "ruff"}, names


def test_frames_convert_to_pandas() -> None:
    # fhiry and FHIR-PYrate users work in pandas: a pmtk frame converts, dtypes intact.
    import polars as pl

    frame = toolkit.flatten(
        "Organization",
        [
            {
                "resourceType": "Bundle",
                "type": "searchset",
                "total": 1,
                "entry": [
                    {"resource": {"resourceType": "Organization", "id": "CL-1", "active": True}}
                ],
            }
        ],
    )
    pdf = frame.to_pandas()
    assert list(pdf.columns) == frame.columns
    assert pdf.loc[0, "id"] == "CL-1"
    assert bool(pdf.loc[0, "active"]) is True
    assert isinstance(frame, pl.DataFrame)

"""toolkit gives Polars' allocator a longer page decay, only when it is imported first."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import toolkit

SHOW = "import os; {imports}; print(os.environ.get('_RJEM_MALLOC_CONF', ''))"


def _conf(imports: str, **env: str) -> str:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("_RJEM_MALLOC_CONF", "PMTK_POLARS_ALLOCATOR")
    }
    done = subprocess.run(
        [sys.executable, "-c", SHOW.format(imports=imports)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout.strip()


def test_importing_toolkit_first_sets_the_decay_and_polars_keeps_it_last() -> None:
    conf = _conf("import toolkit, polars")
    # Polars prepends its defaults; jemalloc applies the options in order, so ours win.
    assert conf.endswith(toolkit.POLARS_ALLOCATOR_CONF)
    assert conf.startswith("dirty_decay_ms:500")


@pytest.mark.parametrize(
    ("imports", "env"),
    [
        ("import polars, toolkit", {}),  # too late: Polars read the setting already
        ("import toolkit, polars", {"PMTK_POLARS_ALLOCATOR": "default"}),
        ("import toolkit, polars", {"_RJEM_MALLOC_CONF": "narenas:2"}),  # the user's choice
    ],
)
def test_the_setting_is_left_alone(imports: str, env: dict[str, str]) -> None:
    assert toolkit.POLARS_ALLOCATOR_CONF not in _conf(imports, **env)

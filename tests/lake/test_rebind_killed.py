"""A rebind killed at each of its steps never mixes two deployments, and running it again
finishes it.

The rebind runs in a child process that ``os._exit``s right after a step (no cleanup,
no lease given back: a SIGKILL or a power cut). What the lake holds is read without
pmtk; what a deployment holds, over plain HTTP. A rebind that moved the name before
removing the old rows (a reordered step) would let the new deployment's sync write
beside the old records, which the ``identity`` case finds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.conftest import toolkit_client
from tests.lake.test_rebind import _files_of, _matches, _names, _sync
from toolkit import lake
from toolkit.lake.rebind import STEPS
from toolkit.mock import serve
from toolkit.store.identity import WrongDeployment


@pytest.fixture
def old_and_new() -> Iterator[tuple[Any, Any]]:
    with serve(seed=0, scale="small") as a, serve(seed=2, scale="small") as c:
        yield a, c


KILLER = """
import os, sys
from toolkit import lake
from toolkit.client import Client
step = sys.argv[2]
def die(name):
    if name == step:
        os._exit(9)  # no cleanup, no lease given back: as a SIGKILL or a power cut
with Client(base_url=os.environ["PM_BASE_URL"], client_id=os.environ["PM_CLIENT_ID"],
            client_secret=os.environ["PM_CLIENT_SECRET"], progress=False) as client:
    lake.rebind(sys.argv[1], "north", client, after_step=die)
"""


@pytest.mark.parametrize("step", [s for s in STEPS if s != "leases"])
def test_a_rebind_killed_at_each_step_never_mixes_and_is_finished_by_running_it_again(
    tmp_path: Path, old_and_new: Any, step: str
) -> None:
    a, c = old_and_new
    where = tmp_path / "lake"
    _sync(a, where, "north")
    env = {
        **os.environ,
        "PM_BASE_URL": c.base_url,
        "PM_CLIENT_ID": c.client_id,
        "PM_CLIENT_SECRET": c.client_secret,
    }
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, str(where), step], env=env, timeout=120, check=False
    )
    assert killed.returncode == 9
    if STEPS.index(step) < STEPS.index("identity"):
        # The name is still the old deployment's: the new one's sync is refused...
        with pytest.raises(WrongDeployment):
            _sync(c, where, "north")
        # ...and once the pins are emptied, nothing of the old one is read through pmtk.
        if STEPS.index(step) >= STEPS.index("pins"):
            assert lake.load("Organization", where, deployment="north").height == 0
        with toolkit_client(c) as client:
            lake.rebind(where, "north", client, lock_timeout=5)
    # Finished (the dead writer's leases are taken over on this host): the name holds the
    # new deployment's records alone, and no file of the old one is left.
    _sync(c, where, "north", lock_timeout=5)
    _matches(where, "north", c)
    only_a = _names(a) - _names(c)
    main_files = [p for p in _files_of(where, "north") if p.parts[-3] == "Organization"]
    stored = pl.concat([pl.read_parquet(p, columns=["name"]) for p in main_files])
    assert only_a and only_a.isdisjoint(set(stored["name"].to_list()))

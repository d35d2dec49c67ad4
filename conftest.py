"""Quiet notebook runs under nbmake (``uv run pytest`` executes every notebook with it).

nbmake is the notebook runner the project chose; two things made its runs noisy:

* nbclient starts each kernel with ``jupyter_client.AsyncKernelManager``, which
  provisions no CurveZMQ keys, so ipykernel printed "Kernel is running over TCP
  without encryption" for every notebook. nbmake offers no way to pass a kernel
  manager, and nbclient resolves its default class by importing
  ``jupyter_client.AsyncKernelManager`` when a notebook starts; in this test
  process that name is pointed at :func:`toolkit.notebooks.kernel_manager_class`,
  the same encrypted manager ``pmtk notebooks`` uses.
* nbmake prints "Learn more about nbmake" from its terminal-summary hook whenever
  ``--nbmake`` is on; its only switch, ``--no-summary``, would also drop pytest's
  ``-ra`` summary. The hook wrapper below turns the option off for that hook only,
  after collection has used it.

And two speed-ups:

* after collection the objects every test shares (imported modules, the collected
  items) are frozen out of the cyclic garbage collector, so each full collection,
  pytest's own at the end of every in-process ``pmtk check`` run included, walks only
  what the tests made since (see :func:`pytest_collection_finish`);
* when the environment says ``PYTHONDONTWRITEBYTECODE`` (a sandbox may), every child
  Python the tests start (``pmtk`` on a terminal or a pipe, a killed writer, a
  notebook's kernel) compiled pmtk and its libraries from source again: about 1.5 s
  of CPU per process and 4 s per kernel, hundreds of times a run. The children share
  one bytecode cache instead, in a temporary folder of this run
  (``PYTHONPYCACHEPREFIX``; this process's later imports, which the xdist workers
  repeat, go there too), so nothing is written beside the sources, as before; when
  the run ends the folder is removed and the setting put back (see
  :func:`_share_bytecode`). A child still runs the code on disk:
  Python checks each cached file against its source's time stamp and size.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
from collections.abc import Generator
from typing import Any

import pytest

_BYTECODE: dict[str, Any] = {}
"""The run's bytecode cache (``folder``), the setting it replaced and the run that owns it."""


def _share_bytecode() -> None:
    """Point this process and its children at one bytecode cache for the run.

    Called at import, before pytest-xdist starts its workers, so that they and every
    child they start inherit it (an xdist worker, or a pytest started by a test, finds
    ``PYTHONPYCACHEPREFIX`` set and leaves it alone). This process's own imports from
    here on (the tests' conftest: pmtk, polars, the mock's server) go there too, before
    the workers and children that import them again.
    """
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    folder = tempfile.mkdtemp(prefix="pmtk-tests-pycache-")
    _BYTECODE.update(folder=folder, setting=os.environ.pop("PYTHONDONTWRITEBYTECODE"))
    os.environ["PYTHONPYCACHEPREFIX"] = folder
    sys.pycache_prefix = folder
    sys.dont_write_bytecode = False


_share_bytecode()


def pytest_unconfigure(config: pytest.Config) -> None:
    """The run that made the bytecode cache removes it and puts the setting back.

    A later ``pytest.main`` in the same process (mutmut's runs, tools/mutation.py) then
    runs as the environment says, without bytecode.
    """
    if _BYTECODE.get("run") is not config:
        return
    os.environ["PYTHONDONTWRITEBYTECODE"] = _BYTECODE["setting"]
    os.environ.pop("PYTHONPYCACHEPREFIX", None)
    sys.pycache_prefix = None
    sys.dont_write_bytecode = True
    shutil.rmtree(_BYTECODE["folder"], ignore_errors=True)
    _BYTECODE.clear()


def pytest_configure(config: pytest.Config) -> None:
    """Own the bytecode cache made at import; point nbclient's kernel manager at the
    encrypted one."""
    if "folder" in _BYTECODE:
        _BYTECODE.setdefault("run", config)
    if not config.getoption("nbmake", default=False):
        return
    import jupyter_client

    from toolkit.notebooks import kernel_manager_class

    jupyter_client.AsyncKernelManager = kernel_manager_class()  # type: ignore[attr-defined]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection left alive: later garbage collections skip it.

    ``pmtk check`` runs its suite with ``pytest.main`` in the test process, and each
    run ends with pytest's ``gc.collect()`` calls (to surface unraisable exceptions);
    over the modules the tests imported, each took about 0.17 s. The garbage of
    collection is collected first, so nothing is kept that would have been freed.
    """
    gc.collect()
    gc.freeze()


@pytest.hookimpl(wrapper=True)
def pytest_terminal_summary(config: pytest.Config) -> Generator[None, None, None]:
    """Run every terminal summary with nbmake's footer switched off."""
    enabled = getattr(config.option, "nbmake", False)
    config.option.nbmake = False
    try:
        yield
    finally:
        config.option.nbmake = enabled

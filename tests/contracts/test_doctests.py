"""The contract suite's docstring examples run here: contracts/ is not in pytest's testpaths
(collecting it would run the suite itself), so ``--doctest-modules`` never reaches it."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import contracts

# The check modules (contracts/test_*.py) and the plugin need a pytest run to import.
MODULES = sorted(
    m.name
    for m in pkgutil.iter_modules(contracts.__path__, "contracts.")
    if not m.name.startswith(("contracts.test_", "contracts.conftest"))
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


def test_the_examples_exist() -> None:
    attempted = sum(doctest.testmod(importlib.import_module(n)).attempted for n in MODULES)
    assert attempted >= 2

"""``toolkit.load`` names a misspelt resource type as such, before opening the store."""

from __future__ import annotations

from pathlib import Path

import pytest

import toolkit
from toolkit.errors import UnknownName


@pytest.mark.parametrize("store", ["missing", "empty"])
def test_a_misspelt_type_gets_did_you_mean_not_a_sync_of_the_typo(
    tmp_path: Path, store: str
) -> None:
    folder = tmp_path / store
    if store == "empty":
        folder.mkdir()
    with pytest.raises(UnknownName, match=r"did you mean 'Appointment'\?") as info:
        toolkit.load("Appointmnet", folder)
    assert "pmtk sync" not in str(info.value)
    assert "Appointmnet" in str(info.value)

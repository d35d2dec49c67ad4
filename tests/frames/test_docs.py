"""docs/views.md documents every view.

``tools/regenerate.py`` writes its tables; ``tests/docs/test_regenerate.py`` keeps them current.
"""

from __future__ import annotations

from pathlib import Path

from toolkit.views import VIEWS

DOC = Path(__file__).resolve().parents[2] / "docs" / "views.md"


def test_every_view_and_column_is_documented() -> None:
    # Against the committed manual, not the generator's output: a view or column
    # missing from docs/views.md fails here even if the regenerate test is skipped.
    text = DOC.read_text(encoding="utf-8")
    for views in VIEWS.values():
        for v in views:
            assert f"#### `{v.name}`" in text
            for c in v.columns:
                assert f"| `{c.name}` |" in text

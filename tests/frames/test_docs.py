"""docs/views.md documents every view, and its tables are the generated ones."""

from __future__ import annotations

from pathlib import Path

from toolkit.views import VIEWS, views_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "views.md"


def test_committed_view_tables_match_the_generated_ones() -> None:
    text = DOC.read_text(encoding="utf-8")
    generated = views_markdown()
    assert text[text.index("## Tables") :] == generated, (
        "docs/views.md is stale: regenerate its '## Tables' section from views_markdown()"
    )


def test_every_view_and_column_is_documented() -> None:
    # Against the committed manual, not the generator's output: a view or column
    # missing from docs/views.md fails here even if the section test is skipped.
    text = DOC.read_text(encoding="utf-8")
    for views in VIEWS.values():
        for v in views:
            assert f"#### `{v.name}`" in text
            for c in v.columns:
                assert f"| `{c.name}` |" in text

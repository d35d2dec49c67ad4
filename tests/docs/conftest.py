"""The docs tests open the built site with the notebooks' offline headless Chromium."""

from tests.notebooks.conftest import chromium

__all__ = ["chromium"]

"""Declared flat views of the listed resources, and the fast Bundle → Polars flattener.

A view is *data*, in the style of a SQL-on-FHIR v2 ViewDefinition: a table name,
an optional ``for_each`` path (one row per element of a repeating structure, for
child tables) and columns, each a ``name``, a ``path`` and a Polars ``dtype``.
:data:`VIEWS` is derived from :mod:`toolkit.catalogue`, so every field, type and
extension url is written once, there.

Path language (a small FHIRPath subset, compiled to Polars expressions):

* ``a.b``                 -- field ``b`` of object ``a``;
* ``first()``             -- first element of an array;
* ``where(url='u')``      -- first element of an array whose ``url`` is ``u``
  (how extension-encoded fields are read);
* ``getReferenceKey()``   -- the id at the end of a reference string, prefix kept
  (``/main/Practitioner/PR-12`` → ``PR-12``);
* ``$this``               -- the row element itself (child tables of references).

Reading is done by Polars' native JSON reader with an explicit schema derived
from the catalogue (:func:`read_schema`); nothing is inferred, so every declared
column exists with its declared dtype even when no record carries it. Top-level
keys the view does not know are kept, as JSON, in the ``extra`` column of the main
table (see :func:`flatten_tables` for how that stays exact and cheap), and every
extension no column reads is a row of the ``<resource>_extension`` table.
"""

from __future__ import annotations

from toolkit.views.declare import (
    DATETIME as DATETIME,
)
from toolkit.views.declare import (
    VIEWS as VIEWS,
)
from toolkit.views.declare import (
    Column as Column,
)
from toolkit.views.declare import (
    Role as Role,
)
from toolkit.views.declare import (
    View as View,
)
from toolkit.views.declare import (
    table_names as table_names,
)
from toolkit.views.declare import (
    view as view,
)
from toolkit.views.declare import (
    views_markdown as views_markdown,
)
from toolkit.views.project import (
    flatten as flatten,
)
from toolkit.views.project import (
    flatten_tables as flatten_tables,
)
from toolkit.views.reader import (
    read_schema as read_schema,
)

__all__ = [
    "DATETIME",
    "VIEWS",
    "Column",
    "View",
    "flatten",
    "flatten_tables",
    "read_schema",
    "table_names",
    "view",
    "views_markdown",
]

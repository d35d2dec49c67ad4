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

from toolkit.views.check import (
    _ENVELOPE as _ENVELOPE,
)
from toolkit.views.check import (
    _MSGSPEC_LEAVES as _MSGSPEC_LEAVES,
)
from toolkit.views.check import (
    _AnyDtype as _AnyDtype,
)
from toolkit.views.check import (
    _column_key as _column_key,
)
from toolkit.views.check import (
    _column_keys as _column_keys,
)
from toolkit.views.check import (
    _msgspec_type as _msgspec_type,
)
from toolkit.views.check import (
    _strict_decoder as _strict_decoder,
)
from toolkit.views.check import (
    _top_fields as _top_fields,
)
from toolkit.views.conform import (
    _ALTERNATIVE_FORMS as _ALTERNATIVE_FORMS,
)
from toolkit.views.conform import (
    _EXTENSION_CONTAINERS as _EXTENSION_CONTAINERS,
)
from toolkit.views.conform import (
    _SKELETON as _SKELETON,
)
from toolkit.views.conform import (
    _SKIP as _SKIP,
)
from toolkit.views.conform import (
    _as_bytes as _as_bytes,
)
from toolkit.views.conform import (
    _Conformer as _Conformer,
)
from toolkit.views.conform import (
    _Fix as _Fix,
)
from toolkit.views.conform import (
    _iter_pages as _iter_pages,
)
from toolkit.views.conform import (
    _Leftovers as _Leftovers,
)
from toolkit.views.conform import (
    _outcome_text as _outcome_text,
)
from toolkit.views.conform import (
    _primitive as _primitive,
)
from toolkit.views.conform import (
    _Problem as _Problem,
)
from toolkit.views.conform import (
    _Skeleton as _Skeleton,
)
from toolkit.views.declare import (
    _CODED_KEYS as _CODED_KEYS,
)
from toolkit.views.declare import (
    _CODING as _CODING,
)
from toolkit.views.declare import (
    _COLUMN_RENAMES as _COLUMN_RENAMES,
)
from toolkit.views.declare import (
    _ELIDED_SEGMENTS as _ELIDED_SEGMENTS,
)
from toolkit.views.declare import (
    _INVALID_DOC as _INVALID_DOC,
)
from toolkit.views.declare import (
    _PREFERRED as _PREFERRED,
)
from toolkit.views.declare import (
    _PRIMITIVE_COLUMN as _PRIMITIVE_COLUMN,
)
from toolkit.views.declare import (
    _PRIMITIVE_READ as _PRIMITIVE_READ,
)
from toolkit.views.declare import (
    _READ_AS_ARRAY as _READ_AS_ARRAY,
)
from toolkit.views.declare import (
    _REFERENCE as _REFERENCE,
)
from toolkit.views.declare import (
    _TABLE_RENAMES as _TABLE_RENAMES,
)
from toolkit.views.declare import (
    _VALUE_ASPECTS as _VALUE_ASPECTS,
)
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
    _column_dtype as _column_dtype,
)
from toolkit.views.declare import (
    _columns as _columns,
)
from toolkit.views.declare import (
    _dtype_text as _dtype_text,
)
from toolkit.views.declare import (
    _extension_value_dtypes as _extension_value_dtypes,
)
from toolkit.views.declare import (
    _extra_column as _extra_column,
)
from toolkit.views.declare import (
    _field_read_dtype as _field_read_dtype,
)
from toolkit.views.declare import (
    _invalid_column as _invalid_column,
)
from toolkit.views.declare import (
    _join as _join,
)
from toolkit.views.declare import (
    _level_read_dtype as _level_read_dtype,
)
from toolkit.views.declare import (
    _reader_fields as _reader_fields,
)
from toolkit.views.declare import (
    _resource_views as _resource_views,
)
from toolkit.views.declare import (
    _rule_source as _rule_source,
)
from toolkit.views.declare import (
    _rules_note as _rules_note,
)
from toolkit.views.declare import (
    _snake as _snake,
)
from toolkit.views.declare import (
    _source_path as _source_path,
)
from toolkit.views.declare import (
    _views_for as _views_for,
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
from toolkit.views.expressions import (
    _OFFSETS as _OFFSETS,
)
from toolkit.views.expressions import (
    _STEP as _STEP,
)
from toolkit.views.expressions import (
    _compile as _compile,
)
from toolkit.views.expressions import (
    _complete_datetimes as _complete_datetimes,
)
from toolkit.views.expressions import (
    _datetime_exact as _datetime_exact,
)
from toolkit.views.expressions import (
    _datetime_fast as _datetime_fast,
)
from toolkit.views.expressions import (
    _steps as _steps,
)
from toolkit.views.expressions import (
    _typed as _typed,
)
from toolkit.views.expressions import (
    _url_is as _url_is,
)
from toolkit.views.project import (
    _per_row as _per_row,
)
from toolkit.views.project import (
    _project as _project,
)
from toolkit.views.project import (
    _row_owner as _row_owner,
)
from toolkit.views.project import (
    _unparsed as _unparsed,
)
from toolkit.views.project import (
    flatten as flatten,
)
from toolkit.views.project import (
    flatten_tables as flatten_tables,
)
from toolkit.views.reader import (
    _BATCH_BYTES as _BATCH_BYTES,
)
from toolkit.views.reader import (
    _NONCE as _NONCE,
)
from toolkit.views.reader import (
    _SENTINEL as _SENTINEL,
)
from toolkit.views.reader import (
    _WORKERS as _WORKERS,
)
from toolkit.views.reader import (
    _batches as _batches,
)
from toolkit.views.reader import (
    _Block as _Block,
)
from toolkit.views.reader import (
    _Compiled as _Compiled,
)
from toolkit.views.reader import (
    _compiled as _compiled,
)
from toolkit.views.reader import (
    _compiled_table as _compiled_table,
)
from toolkit.views.reader import (
    _executor as _executor,
)
from toolkit.views.reader import (
    _kind_error as _kind_error,
)
from toolkit.views.reader import (
    _locate as _locate,
)
from toolkit.views.reader import (
    _pool as _pool,
)
from toolkit.views.reader import (
    _pool_lock as _pool_lock,
)
from toolkit.views.reader import (
    _prepare as _prepare,
)
from toolkit.views.reader import (
    _read_batch as _read_batch,
)
from toolkit.views.reader import (
    _read_block as _read_block,
)
from toolkit.views.reader import (
    _read_entries as _read_entries,
)
from toolkit.views.reader import (
    _read_error as _read_error,
)
from toolkit.views.reader import (
    _repair as _repair,
)
from toolkit.views.reader import (
    _repair_entry as _repair_entry,
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

"""The mock's write validation: the catalogue rules of :mod:`toolkit.rules`, mock options.

:func:`validate` reports every broken rule as a ``(path, message)`` pair, where
``path`` is the FHIRPath-like location used in ``OperationOutcome.issue[].expression``
(``attachments[0].contentType``). Nothing here knows about HTTP. What only the mock
adds: references must resolve in its store, the attachment size limit is an option
of the deployment, and the ``attachment-type-unchecked`` fault switches the
content-type rule off. A body is always checked as a whole record (a patch is
checked after merging), so ``create_required`` applies and null is never a value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolkit import catalogue, rules
from toolkit.catalogue import Resource

__all__ = ["Problem", "validate"]

Problem = tuple[str, str]
SERVER_FIELDS = frozenset({"id", "meta"})


def validate(
    resource: Resource,
    body: dict[str, Any],
    *,
    resolves: Callable[[str], bool] | None = None,
    max_attachment_bytes: int = catalogue.MAX_ATTACHMENT_BYTES,
    check_attachment_types: bool = True,
    accept_arrays: frozenset[str] = frozenset(),
) -> list[Problem]:
    """Every catalogue rule ``body`` breaks, as ``(path, message)`` pairs.

    ``resolves`` (``/main/<Type>/<id>`` -> bool) checks that references point at
    existing records. ``accept_arrays`` lists catalogue paths (``Practitioner.name``)
    whose single object may also come as an array of such objects.
    """
    options = rules.Options(
        mode="create",
        server_fields=SERVER_FIELDS,
        resolves=resolves,
        max_attachment_bytes=max_attachment_bytes,
        check_attachment_types=check_attachment_types,
        accept_arrays=accept_arrays,
    )
    return [(v.path, v.message) for v in rules.check_resource(resource, body, options)]

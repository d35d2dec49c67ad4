"""The mock's ASGI application (Starlette): auth, rate limit, the 22 endpoints, test controls.

Request path of a resource call: User-Agent check (403) -> bearer token (401)
-> sliding-window rate limit (429) -> fault hooks -> handler. Every error is a
FHIR OperationOutcome; nothing answers with a traceback.
"""

from __future__ import annotations

from toolkit.mock.app.patching import (
    merge_participants as merge_participants,
)
from toolkit.mock.app.patching import (
    merge_patch as merge_patch,
)
from toolkit.mock.app.records import (
    origin as origin,
)
from toolkit.mock.app.records import (
    release_slot as release_slot,
)
from toolkit.mock.app.responses import (
    ALL_METHODS as ALL_METHODS,
)
from toolkit.mock.app.responses import (
    BODY_TYPES as BODY_TYPES,
)
from toolkit.mock.app.responses import (
    CREATABLE as CREATABLE,
)
from toolkit.mock.app.responses import (
    DATE_SORT as DATE_SORT,
)
from toolkit.mock.app.responses import (
    EMPTY_405 as EMPTY_405,
)
from toolkit.mock.app.responses import (
    FHIR_JSON as FHIR_JSON,
)
from toolkit.mock.app.responses import (
    LISTED as LISTED,
)
from toolkit.mock.app.responses import (
    OWNER_PARAM as OWNER_PARAM,
)
from toolkit.mock.app.responses import (
    PATCH_TYPES as PATCH_TYPES,
)
from toolkit.mock.app.responses import (
    PATCHABLE as PATCHABLE,
)
from toolkit.mock.app.responses import (
    PREFIXES as PREFIXES,
)
from toolkit.mock.app.responses import (
    READABLE as READABLE,
)
from toolkit.mock.app.responses import (
    TOKEN_BODY_LIMIT as TOKEN_BODY_LIMIT,
)
from toolkit.mock.app.responses import (
    Ctx as Ctx,
)
from toolkit.mock.app.responses import (
    Handler as Handler,
)
from toolkit.mock.app.responses import (
    Problem4xx as Problem4xx,
)
from toolkit.mock.app.responses import (
    TruncatedResponse as TruncatedResponse,
)
from toolkit.mock.app.responses import (
    error as error,
)
from toolkit.mock.app.responses import (
    fhir as fhir,
)
from toolkit.mock.app.responses import (
    outcome_bytes as outcome_bytes,
)
from toolkit.mock.app.rooms import (
    MockApp as MockApp,
)
from toolkit.mock.app.routes import (
    KNOWN_TYPES as KNOWN_TYPES,
)
from toolkit.mock.app.routes import (
    OPERATIONS as OPERATIONS,
)
from toolkit.mock.app.routes import (
    Gate as Gate,
)
from toolkit.mock.app.routes import (
    create_app as create_app,
)
from toolkit.mock.app.routes import (
    route_key as route_key,
)

__all__ = ["create_app"]

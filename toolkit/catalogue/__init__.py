"""The one declarative description of the practice-management API.

Every rule pmtk applies is written here once, as plain typed data, and derived
everywhere else: the flat views and pandera schemas of the fetch layer, the
OpenAPI document and conformance checks of the contract suite, and the write
validation and synthetic data of the mock deployment.

Sources, in order of authority:

* ``spec``  -- ``practice-management-api.md`` (the user's document; it wins).
* ``facts`` -- ``public-docs-facts.md`` (vendor docs and existing clients), used
  only where the spec says "not shown".
* ``pmtk``  -- a decision of ours where both are silent, documented in the README.

This module imports nothing heavier than the standard library and pycountry, so
that the mock, the client and the contract suite can all share it.

JSON shapes chosen where the spec names a field but not its encoding:

* Spec fields that are FHIR *extensions* (``location-type``,
  ``appointment-participant-status``, ``appointment-participant-invoice``,
  ``coverage patient anonymous``, ``coverage payer``, ``coverage organisation``,
  ``invoice-line-funder``) live in ``extension`` (or ``modifierExtension``) as
  ``{"url": <name>, <valueX>: ...}``; :class:`Extension` records which.
* Reference fields are ``{"reference": "/main/<Type>/<id>", "type": "<Type>"}``.
"""

from __future__ import annotations

from toolkit.catalogue.capability import (
    METADATA_PATH,
    RESULT_PARAMETERS,
    capability_differences,
    capability_statement,
    declared_search,
)
from toolkit.catalogue.constants import (
    API_PREFIX,
    ATTACHMENT_CONTENT_TYPES,
    DEFAULT_PAGE_SIZE,
    EU_UK_COUNTRIES,
    EXPIRES_IN_STATED,
    FHIR_JSON,
    ID_PREFIX_MEANINGS,
    MAX_ATTACHMENT_BYTES,
    MAX_PAGE_SIZE,
    MERGE_PATCH_JSON,
    ORGANIZATION_TYPE_SYSTEM,
    PROFESSION_SYSTEM,
    RATE_LIMIT_HEADERS,
    RATE_LIMIT_PER_MINUTE,
    RATE_LIMIT_WINDOW_SECONDS,
    REGIONS,
    RETRY_AFTER_HEADER,
    TOKEN_LIFETIME_STATED,
)
from toolkit.catalogue.endpoints import (
    COMMON_SEARCH_PARAMETERS,
    CONTRACT_CATEGORIES,
    CREATE_PATHS,
    DATE_SEARCH,
    ENDPOINTS,
    EXPORT_IDS,
    LISTED_RESOURCES,
    NAME_ARRAYS,
    OWNER_SEARCH,
    PATCH_ANSWERS_EMPTY_405,
    PATCHABLE,
    SEARCH_ALIASES,
    SEARCH_PARAMETERS,
    endpoint_source,
)
from toolkit.catalogue.lookup import (
    country_codes,
    currency_codes,
    field_at,
    format_pattern,
    resource,
    search_keywords,
    walk_fields,
)
from toolkit.catalogue.model import (
    SOURCE_RANK,
    Aspect,
    Endpoint,
    Extension,
    Field,
    FieldType,
    Format,
    Ref,
    Resource,
    Source,
    Target,
    weakest,
)
from toolkit.catalogue.resources import (
    ADDRESS,
    APPOINTMENT,
    ATTACHMENTS,
    CHARGE_ITEM_DEFINITION,
    CODING,
    COVERAGE,
    HEALTHCARE_SERVICE,
    INVOICE,
    INVOICE_LINE,
    LOCATION_TYPES,
    META,
    MONEY,
    ORG_ANY,
    ORGANIZATION,
    PARTICIPANT_STATUSES,
    PATIENT,
    PR,
    PRACTITIONER,
    PRACTITIONER_ANY,
    PRACTITIONER_ROLE,
    REFERRAL,
    REFERRAL_DEFINITION,
    RESOURCES,
    ROLE_ANY,
    SLOT,
    TELECOM,
)

__all__ = [
    "ADDRESS",
    "API_PREFIX",
    "APPOINTMENT",
    "ATTACHMENTS",
    "ATTACHMENT_CONTENT_TYPES",
    "CHARGE_ITEM_DEFINITION",
    "CODING",
    "COMMON_SEARCH_PARAMETERS",
    "CONTRACT_CATEGORIES",
    "COVERAGE",
    "CREATE_PATHS",
    "DATE_SEARCH",
    "DEFAULT_PAGE_SIZE",
    "ENDPOINTS",
    "EU_UK_COUNTRIES",
    "EXPIRES_IN_STATED",
    "EXPORT_IDS",
    "FHIR_JSON",
    "HEALTHCARE_SERVICE",
    "ID_PREFIX_MEANINGS",
    "INVOICE",
    "INVOICE_LINE",
    "LISTED_RESOURCES",
    "LOCATION_TYPES",
    "MAX_ATTACHMENT_BYTES",
    "MAX_PAGE_SIZE",
    "MERGE_PATCH_JSON",
    "META",
    "METADATA_PATH",
    "MONEY",
    "NAME_ARRAYS",
    "ORGANIZATION",
    "ORGANIZATION_TYPE_SYSTEM",
    "ORG_ANY",
    "OWNER_SEARCH",
    "PARTICIPANT_STATUSES",
    "PATCHABLE",
    "PATCH_ANSWERS_EMPTY_405",
    "PATIENT",
    "PR",
    "PRACTITIONER",
    "PRACTITIONER_ANY",
    "PRACTITIONER_ROLE",
    "PROFESSION_SYSTEM",
    "RATE_LIMIT_HEADERS",
    "RATE_LIMIT_PER_MINUTE",
    "RATE_LIMIT_WINDOW_SECONDS",
    "REFERRAL",
    "REFERRAL_DEFINITION",
    "REGIONS",
    "RESOURCES",
    "RESULT_PARAMETERS",
    "RETRY_AFTER_HEADER",
    "ROLE_ANY",
    "SEARCH_ALIASES",
    "SEARCH_PARAMETERS",
    "SLOT",
    "SOURCE_RANK",
    "TELECOM",
    "TOKEN_LIFETIME_STATED",
    "Aspect",
    "Endpoint",
    "Extension",
    "Field",
    "FieldType",
    "Format",
    "Ref",
    "Resource",
    "Source",
    "Target",
    "capability_differences",
    "capability_statement",
    "country_codes",
    "currency_codes",
    "declared_search",
    "endpoint_source",
    "field_at",
    "format_pattern",
    "resource",
    "search_keywords",
    "walk_fields",
    "weakest",
]

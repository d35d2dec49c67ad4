"""Settings of a :class:`toolkit.Client`: where the deployment is and who is calling.

Every setting can come from a keyword argument or from the environment:

==================  =====================  ==============================================
Argument            Environment variable   Meaning
==================  =====================  ==============================================
``base_url``        ``PM_BASE_URL``        Regional address including ``/main``
``region``          ``PM_REGION``          ``"au"`` or ``"eu"`` (picks ``catalogue.REGIONS``)
``client_id``       ``PM_CLIENT_ID``       OAuth client id of the API key
``client_secret``   ``PM_CLIENT_SECRET``   OAuth client secret of the API key
``user_agent``      ``PM_USER_AGENT``      ``"<vendor name> (<vendor email>)"``
==================  =====================  ==============================================

An explicit argument wins over the environment; ``base_url`` wins over ``region``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from toolkit import catalogue
from toolkit.errors import ConfigurationError

__all__ = [
    "DEFAULT_USER_AGENT",
    "Secret",
    "Settings",
    "region_for_country",
    "resolve_settings",
]

DEFAULT_USER_AGENT = "pmtk/0.1 (set PM_USER_AGENT)"
"""Sent when no user agent is configured; the API refuses requests without one."""


class Secret:
    """A string that never shows itself in a repr, a str or a traceback's locals.

    Parameters
    ----------
    value
        The secret text. Read it back with :meth:`reveal`.

    Examples
    --------
    >>> s = Secret("hunter2")
    >>> s
    Secret('**********')
    >>> s.reveal()
    'hunter2'
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret text itself; pass it on, never print it."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __bool__(self) -> bool:
        return bool(self._value)


@dataclass(frozen=True, slots=True)
class Settings:
    """Resolved connection settings. The secret is wrapped so that a repr is safe."""

    base_url: str
    client_id: str
    client_secret: Secret
    user_agent: str

    @property
    def token_url(self) -> str:
        """The OAuth token endpoint, ``{base_url}/oauth/token``."""
        return f"{self.base_url}/oauth/token"


def region_for_country(country: str) -> str:
    """The region whose address a client in ``country`` must use.

    Parameters
    ----------
    country
        ISO 3166 alpha-2 code of the client's country, any case.

    Returns
    -------
    str
        ``"eu"`` for the EU member states and the UK, ``"au"`` for every other country.

    Raises
    ------
    ConfigurationError
        When ``country`` is not an ISO 3166 alpha-2 code.

    Examples
    --------
    >>> region_for_country("GB")
    'eu'
    >>> region_for_country("au")
    'au'
    """
    code = country.strip().upper() if isinstance(country, str) else ""
    if code not in catalogue.country_codes():
        msg = f"unknown country code {country!r}: expected an ISO 3166 alpha-2 code such as 'AU'"
        raise ConfigurationError(msg)
    return "eu" if code in catalogue.EU_UK_COUNTRIES else "au"


def _base_url_for(region: str) -> str:
    key = region.strip().lower()
    try:
        return catalogue.REGIONS[key]
    except KeyError:
        known = ", ".join(sorted(catalogue.REGIONS))
        msg = f"unknown region {region!r}; expected one of: {known}"
        raise ConfigurationError(msg) from None


def resolve_settings(
    base_url: str | None = None,
    client_id: str | None = None,
    client_secret: str | Secret | None = None,
    *,
    user_agent: str | None = None,
    region: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Combine arguments and environment into :class:`Settings`.

    Parameters
    ----------
    base_url, client_id, client_secret, user_agent, region
        Explicit settings; ``None`` falls back to the environment.
    environ
        The environment to read (default ``os.environ``).

    Raises
    ------
    ConfigurationError
        When the address or a credential is missing; the message names the
        environment variable to set.
    """
    env = os.environ if environ is None else environ
    if base_url is None and region is None:
        base_url = env.get("PM_BASE_URL") or None
        if base_url is None and env.get("PM_REGION"):
            region = env["PM_REGION"]
    if base_url is None and region is not None:
        base_url = _base_url_for(region)
    if not base_url:
        msg = (
            "no deployment address: pass base_url= or region=, or set PM_BASE_URL "
            "(for example https://au-api.halaxy.com/main)"
        )
        raise ConfigurationError(msg)
    if not base_url.startswith(("http://", "https://")):
        msg = f"base_url must start with http:// or https://, got {base_url!r}"
        raise ConfigurationError(msg)
    client_id = client_id if client_id is not None else env.get("PM_CLIENT_ID")
    if not client_id:
        msg = "no client id: pass client_id= or set PM_CLIENT_ID"
        raise ConfigurationError(msg)
    if client_secret is None:
        client_secret = env.get("PM_CLIENT_SECRET")
    secret = client_secret if isinstance(client_secret, Secret) else Secret(client_secret or "")
    if not secret:
        msg = "no client secret: pass client_secret= or set PM_CLIENT_SECRET"
        raise ConfigurationError(msg)
    agent = user_agent or env.get("PM_USER_AGENT") or DEFAULT_USER_AGENT
    return Settings(base_url.rstrip("/"), client_id, secret, agent)

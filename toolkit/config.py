"""Settings of every pmtk entry point: where the deployment is and who is calling.

One configuration path serves :class:`toolkit.Client`, :func:`toolkit.connect`,
``pmtk check``, ``pmtk sync`` and the notebooks. Each setting comes from a keyword
argument, else the environment, else a ``.env`` file: the nearest one from the
working directory up to the project root (:func:`find_dotenv`; read by
pydantic-settings):

==================  =====================  ==============================================
Argument            Environment variable   Meaning
==================  =====================  ==============================================
``base_url``        ``PM_BASE_URL``        Regional address including ``/main``
``region``          ``PM_REGION``          ``"au"`` or ``"eu"`` (picks ``catalogue.REGIONS``)
``client_id``       ``PM_CLIENT_ID``       OAuth client id of the API key
``client_secret``   ``PM_CLIENT_SECRET``   OAuth client secret of the API key
``user_agent``      ``PM_USER_AGENT``      ``"<vendor name> (<vendor email>)"``
(analysis ``tz=``)  ``PM_TIMEZONE``        IANA zone for all analysis (checked here too)
==================  =====================  ==============================================

An explicit argument wins over the environment, which wins over ``.env``;
``base_url`` wins over ``region``. The embedded mock deployment is used only when
*nothing* is configured: credentials without an address are refused, and so is a
``PM_`` variable whose name is a near miss of a known one (``PM_BASEURL``), because
silently checking the mock instead of the user's deployment is a false pass.
"""

from __future__ import annotations

import difflib
import io
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from toolkit import catalogue
from toolkit.errors import ConfigurationError

__all__ = [
    "DEFAULT_USER_AGENT",
    "KNOWN_VARIABLES",
    "PmtkConfigWarning",
    "Secret",
    "Settings",
    "check_base_url",
    "configured",
    "region_for_country",
    "resolve_settings",
]

DEFAULT_USER_AGENT = "pmtk/0.1 (set PM_USER_AGENT)"
"""Sent when no user agent is configured; the API refuses requests without one."""

CONNECTION_VARIABLES = (
    "PM_BASE_URL",
    "PM_REGION",
    "PM_CLIENT_ID",
    "PM_CLIENT_SECRET",
    "PM_USER_AGENT",
)
"""The variables that select and authenticate a deployment."""

KNOWN_VARIABLES = (
    *CONNECTION_VARIABLES,
    "PM_BASELINE",  # the conformance notebook's baseline report
    "PM_ACCESS_TOKEN",  # replaying a report's curl line by hand
    "PM_TIMEZONE",  # the practice's time zone for analysis
)
"""Every ``PM_`` variable pmtk reads; any other near-miss name is a configuration error."""


class PmtkConfigWarning(UserWarning):
    """A setting pmtk can work without, but that the user most likely meant to give."""


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


class _Environment(BaseSettings):
    """The ``PM_`` variables of the environment and of ``./.env`` (environment first)."""

    model_config = SettingsConfigDict(
        env_prefix="PM_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        case_sensitive=False,
    )

    base_url: str | None = None
    region: str | None = None
    client_id: str | None = None
    client_secret: SecretStr | None = None
    user_agent: str | None = None
    timezone: str | None = None


def _dotenv_names(path: Path) -> list[str]:
    """The names ``path`` sets; a line python-dotenv cannot read is refused, naming it.

    pydantic-settings would log python-dotenv's own warning for such a line, once per
    read and without the file's name, then ignore it: a setting on that line would be
    lost, and the embedded mock checked instead of the deployment.
    """
    from dotenv.parser import parse_stream

    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    except UnicodeDecodeError as exc:
        msg = f"cannot read {path.resolve()}: not UTF-8 text ({exc.reason})"
        raise ConfigurationError(msg) from None
    names = []
    for binding in parse_stream(io.StringIO(text)):
        if binding.error:
            # Never the line's text: it may hold a secret.
            msg = (
                f"{path.resolve()} line {binding.original.line}: not a setting "
                "(expected NAME=value, a comment starting with #, or an empty line)"
            )
            raise ConfigurationError(msg)
        if binding.key:
            names.append(binding.key)
    return names


def _check_timezone(value: str | None, where: str) -> None:
    """Refuse a ``PM_TIMEZONE`` that is not an IANA zone now, not in a notebook's cell 2."""
    import zoneinfo

    if value is None or not value.strip():
        return
    try:
        zoneinfo.ZoneInfo(value.strip())
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        msg = (
            f"PM_TIMEZONE={value!r} ({where}) is not an IANA time zone name; use a name "
            "such as 'Australia/Sydney', 'Europe/London' or 'UTC'"
        )
        raise ConfigurationError(msg) from None


def _check_names(names: list[str], where: str) -> None:
    """Refuse a ``PM_`` name that is a near miss of a known one (a typo)."""
    for name in names:
        upper = name.upper()
        if not upper.startswith("PM_") or upper in KNOWN_VARIABLES:
            continue
        close = difflib.get_close_matches(upper, KNOWN_VARIABLES, n=1, cutoff=0.75)
        if close:
            msg = (
                f"unknown setting {name} ({where}): did you mean {close[0]}? "
                f"pmtk reads {', '.join(KNOWN_VARIABLES)}"
            )
            raise ConfigurationError(msg)


def read_environment(environ: Mapping[str, str] | None) -> _Environment:
    if environ is not None:
        _check_names(list(environ), "environment")
        values = {k[3:].lower(): v for k, v in environ.items() if k.upper().startswith("PM_")}
        fields = _Environment.model_fields
        known: dict[str, object] = {k: v for k, v in values.items() if k in fields}
        if isinstance(secret := known.get("client_secret"), str):
            known["client_secret"] = SecretStr(secret)
        env = _Environment.model_construct(None, **known)
        _check_timezone(env.timezone, "environment")
        return env
    _check_names(list(os.environ), "environment")
    dotenv = find_dotenv()
    where = f"file {dotenv}" if dotenv is not None else "file .env"
    _check_names(_dotenv_names(dotenv) if dotenv is not None else [], where)
    env = _Environment(_env_file=dotenv)  # type: ignore[call-arg]
    _check_timezone(env.timezone, "environment" if os.environ.get("PM_TIMEZONE") else where)
    return env


PROJECT_MARKERS = (".git", "pyproject.toml")
"""What marks a project's root folder: the ``.env`` search goes no higher."""


def project_root(start: Path | None = None) -> Path | None:
    """The project ``start`` (default the working directory) is in: the nearest folder
    from it upwards that holds ``.git`` or ``pyproject.toml``; ``None`` outside any."""
    here = (start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return folder
    return None


def find_dotenv(start: Path | None = None) -> Path | None:
    """The ``.env`` file settings are read from: the nearest one up to the project root.

    From ``start`` (default the working directory) up through its parents to the
    project root, the first folder holding ``.git`` or ``pyproject.toml``: ``pmtk
    sync`` run in ``docs/`` reads the project's ``.env`` (it used to look in ``docs/``
    only, find nothing and sync the embedded mock). Outside any project only
    ``start`` itself is looked in: a ``.env`` in a home folder or ``/`` is never
    picked up by a command run somewhere below it.

    Examples
    --------
    >>> find_dotenv(Path("/")) is None or find_dotenv(Path("/")) == Path("/.env")
    True
    """
    here = (start if start is not None else Path.cwd()).resolve()
    root = project_root(here)
    folders = (
        [here] if root is None else [here, *here.parents[: len(here.parents) - len(root.parents)]]
    )
    for folder in folders:
        candidate = folder / ".env"
        if candidate.is_file():
            return candidate
    return None


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


def check_base_url(base_url: str) -> str:
    """``base_url`` without a trailing slash, or a :class:`ConfigurationError` saying the fix.

    Examples
    --------
    >>> check_base_url("https://au-api.halaxy.com/main/")
    'https://au-api.halaxy.com/main'
    >>> check_base_url("https://au-api.halaxy.com")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    toolkit.errors.ConfigurationError: ... use https://au-api.halaxy.com/main
    """
    text = base_url.strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        msg = (
            f"base URL {base_url!r} must be an http:// or https:// address with a host, "
            f"for example {catalogue.REGIONS['au']}"
        )
        raise ConfigurationError(msg)
    if parts.username is not None or parts.password is not None:
        msg = "base URL must not carry a user name or password: pass client_id/client_secret"
        raise ConfigurationError(msg)
    if parts.query or parts.fragment:
        msg = f"base URL {base_url!r} must not have a query or fragment"
        raise ConfigurationError(msg)
    path = parts.path.rstrip("/")
    if not path.endswith(catalogue.API_PREFIX):
        fixed = f"{parts.scheme}://{parts.netloc}{path}{catalogue.API_PREFIX}"
        msg = (
            f"base URL {base_url!r} must end with {catalogue.API_PREFIX} (every resource "
            f"path begins with {catalogue.API_PREFIX}): use {fixed}"
        )
        raise ConfigurationError(msg)
    return f"{parts.scheme}://{parts.netloc}{path}"


def configured(
    *,
    base_url: str | None = None,
    region: str | None = None,
    client_id: str | None = None,
    client_secret: str | Secret | None = None,
    environ: Mapping[str, str] | None = None,
) -> bool:
    """Whether a deployment is configured; ``False`` means "use the embedded mock".

    Raises
    ------
    ConfigurationError
        When credentials are given without an address (they would otherwise be sent
        to the local mock, or dropped), or a ``PM_`` variable name is a near miss.
    """
    env = read_environment(environ)
    has_address = bool(base_url or region or env.base_url or env.region)
    has_credentials = bool(client_id or client_secret or env.client_id or env.client_secret)
    if has_credentials and not has_address:
        msg = (
            "credentials are configured (PM_CLIENT_ID / PM_CLIENT_SECRET or arguments) but "
            "no deployment address: set PM_BASE_URL (for example "
            f"{catalogue.REGIONS['au']}) or PM_REGION; to use the embedded mock, unset the "
            "credentials"
        )
        raise ConfigurationError(msg)
    return has_address


def resolve_settings(
    base_url: str | None = None,
    client_id: str | None = None,
    client_secret: str | Secret | None = None,
    *,
    user_agent: str | None = None,
    region: str | None = None,
    environ: Mapping[str, str] | None = None,
    warn: bool = True,
) -> Settings:
    """Combine arguments, environment and ``.env`` into :class:`Settings`.

    Parameters
    ----------
    base_url, client_id, client_secret, user_agent, region
        Explicit settings; ``None`` falls back to the environment, then ``.env``.
    environ
        The environment to read instead of ``os.environ`` and ``.env``.
    warn
        Emit a :class:`PmtkConfigWarning` when no user agent is configured.

    Raises
    ------
    ConfigurationError
        When the address or a credential is missing or malformed; the message names
        the environment variable to set, or the fix.
    """
    env = read_environment(environ)
    address = _address(base_url, region, env)
    client_id, secret = _credentials(client_id, client_secret, env)
    agent = user_agent or env.user_agent
    if not agent:
        agent = DEFAULT_USER_AGENT
        if warn:
            msg = (
                f"no user agent configured; sending {DEFAULT_USER_AGENT!r}. The API asks "
                "every application to identify itself: set PM_USER_AGENT (or user_agent=) to "
                "'<vendor name> (<vendor email>)'"
            )
            # stacklevel 3: past this function and its caller (Client.__init__), to the user.
            warnings.warn(msg, PmtkConfigWarning, stacklevel=3)
    return Settings(address, client_id, secret, agent)


def _address(base_url: str | None, region: str | None, env: _Environment) -> str:
    """The checked base URL: ``base_url``, else ``region``, else the environment's."""
    if base_url is None and region is None:
        base_url = env.base_url or None
        if base_url is None and env.region:
            region = env.region
    if base_url is None and region is not None:
        base_url = _base_url_for(region)
    if not base_url:
        msg = (
            "no deployment address: pass base_url= or region=, or set PM_BASE_URL "
            f"(for example {catalogue.REGIONS['au']})"
        )
        raise ConfigurationError(msg)
    return check_base_url(base_url)


def _credentials(
    client_id: str | None, client_secret: str | Secret | None, env: _Environment
) -> tuple[str, Secret]:
    """The client id and secret: the arguments, else the environment's."""
    client_id = client_id if client_id is not None else env.client_id
    if not client_id:
        msg = "no client id: pass client_id= or set PM_CLIENT_ID"
        raise ConfigurationError(msg)
    if client_secret is None and env.client_secret is not None:
        client_secret = env.client_secret.get_secret_value()
    secret = client_secret if isinstance(client_secret, Secret) else Secret(client_secret or "")
    if not secret:
        msg = "no client secret: pass client_secret= or set PM_CLIENT_SECRET"
        raise ConfigurationError(msg)
    return client_id, secret

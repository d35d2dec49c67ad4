"""Which deployment a store was made from: recorded in its manifest, checked by every writer.

A store holds the records of one deployment. Its manifest records that deployment
(``"deployment"``: the base URL and a one-way hash of the client id, never the
secret), and a sync, ``pmtk listen`` or a :func:`toolkit.store.load` given a client
refuse a store of another deployment instead of mixing the two. ``rebind`` discards
the data of the old deployment and makes the store the new one's (a full sync follows).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from toolkit import views
from toolkit.config import configured
from toolkit.mock import embedded
from toolkit.store.layout import (
    DATA_FILE_NAME,
    load_manifest_for_write,
    manifest_path,
    rmtree,
    write_json,
)
from toolkit.store.paths import path_problem
from toolkit.store.rawtable import raw_table
from toolkit.store.results import (
    DEFAULT_STORE,
    MOCK_STORE,
    STAGING,
    STORE_FORMAT,
    STORE_KIND,
    StoreError,
)

DEPLOYMENT_KEY = "deployment"
"""The manifest key holding the store's deployment."""

_HASH_PREFIX = b"pmtk store deployment client id\x00"
"""Domain separation: the hash of a client id here is not a bare sha256 of it."""


class WrongDeployment(StoreError):
    """The store holds another deployment's data (or cannot tell whose); nothing was written."""


@dataclass(frozen=True, slots=True)
class Deployment:
    """A deployment as a store records it.

    Attributes
    ----------
    base_url
        The API base URL, normalised (lower-case scheme and host, no default port,
        no trailing slash).
    client_id_sha256
        The first 16 hex digits of a sha256 of the client id (domain-separated):
        enough to tell two API keys apart, never the id itself, never the secret.
    embedded_mock
        Whether it is the embedded mock that :func:`toolkit.connect` starts when
        nothing is configured. Its port changes from run to run, so embedded-mock
        stores match each other whatever their recorded URL.
    """

    base_url: str
    client_id_sha256: str
    embedded_mock: bool = False

    def same_as(self, other: Deployment) -> bool:
        """Whether ``other`` is this deployment (same address and API key)."""
        if self.embedded_mock or other.embedded_mock:
            return self.embedded_mock and other.embedded_mock
        return (self.base_url, self.client_id_sha256) == (other.base_url, other.client_id_sha256)

    def describe(self) -> str:
        """``https://host/main (client id #1a2b3c4d5e6f7a8b)``, or the embedded mock."""
        if self.embedded_mock:
            return "the embedded mock"
        return f"{self.base_url} (client id #{self.client_id_sha256})"

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``"deployment"`` object."""
        data: dict[str, Any] = {
            "base_url": self.base_url,
            "client_id_sha256": self.client_id_sha256,
        }
        if self.embedded_mock:
            data["embedded_mock"] = True
        return data

    @classmethod
    def from_json(cls, data: Any) -> Deployment | None:
        """The deployment a manifest records (``None`` when it records none usable)."""
        if not isinstance(data, dict):
            return None
        base_url = data.get("base_url")
        digest = data.get("client_id_sha256")
        if not isinstance(base_url, str) or not isinstance(digest, str):
            return None
        return cls(base_url, digest, data.get("embedded_mock") is True)


def hash_client_id(client_id: str) -> str:
    """The one-way, domain-separated hash of a client id that a manifest records."""
    return hashlib.sha256(_HASH_PREFIX + client_id.encode()).hexdigest()[:16]


def normalise_base_url(url: str) -> str:
    """``HTTPS://Host:443/main/`` -> ``https://host/main``: one spelling per deployment."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    default = {"http": 80, "https": 443}.get(scheme)
    port = parts.port
    netloc = host if port is None or port == default else f"{host}:{port}"
    return urlunsplit((scheme, netloc, parts.path.rstrip("/"), "", ""))


def _is_embedded_mock(base_url: str) -> bool:
    """Whether ``base_url`` is the embedded mock this process started (if any)."""

    dep = embedded.EMBEDDED.get("deployment")
    return dep is not None and normalise_base_url(str(dep.base_url)) == base_url


def deployment_of(source: Any) -> Deployment | None:
    """The deployment a client (or any object with ``base_url``/``client_id``) talks to.

    Parameters
    ----------
    source
        A :class:`toolkit.Client`, a :class:`Deployment`, or another page source.

    Returns
    -------
    Deployment or None
        ``None`` for a source that names no deployment (a test double): there is
        nothing to bind a store to.
    """
    if isinstance(source, Deployment):
        return source
    base_url = getattr(source, "base_url", None)
    client_id = getattr(source, "client_id", None)
    if not isinstance(base_url, str) or not isinstance(client_id, str):
        return None
    url = normalise_base_url(base_url)
    return Deployment(url, hash_client_id(client_id), _is_embedded_mock(url))


def default_store(source: Any = None) -> str:
    """The default store folder: ``pmtk-store-mock`` for the embedded mock, else ``pmtk-store``.

    Parameters
    ----------
    source
        The client that will sync; ``None`` asks the settings (``PM_*``, ``.env``)
        whether a deployment is configured, as :func:`toolkit.connect` would.
    """
    if source is None:
        return DEFAULT_STORE if configured() else MOCK_STORE
    dep = deployment_of(source)
    return MOCK_STORE if dep is not None and dep.embedded_mock else DEFAULT_STORE


def recorded_deployment(manifest: dict[str, Any]) -> Deployment | None:
    """The deployment a parsed manifest records, if any."""
    return Deployment.from_json(manifest.get(DEPLOYMENT_KEY))


def _holds_data(manifest: dict[str, Any]) -> bool:
    resources = manifest.get("resources")
    if not isinstance(resources, dict):
        return False
    return any(isinstance(e, dict) and e.get("tables") for e in resources.values())


def _fix(root: Path, current: Deployment) -> str:
    return (
        f"Sync {current.describe()} into a new folder (--out NEW-FOLDER), or run again with "
        f"--rebind (rebind=True) to discard the data in {root} and sync it in full from "
        f"{current.describe()}"
    )


def check_deployment(
    root: Path, manifest: dict[str, Any], current: Deployment | None, *, rebind: bool = False
) -> Literal["keep", "bind", "rebind"]:
    """Raise unless ``current`` may use the store whose manifest is ``manifest``.

    Parameters
    ----------
    root
        The store folder (for the message).
    manifest
        Its parsed manifest.
    current
        The deployment of the client at hand (``None``: nothing to check).
    rebind
        Allow another deployment's store: the caller will discard its data.

    Returns
    -------
    str
        ``"keep"``: the store is ``current``'s already (or there is nothing to
        check); ``"bind"``: record ``current``, keeping the data (there is none, or
        only records written without a client by this pmtk); ``"rebind"``: record
        ``current`` and discard the data (``rebind`` was asked for).

    Raises
    ------
    WrongDeployment
        The store holds another deployment's data, or data of an unrecorded one.
    """
    if current is None:
        return "keep"
    recorded = recorded_deployment(manifest)
    if recorded is not None and recorded.same_as(current):
        return "keep"
    if recorded is None and _holds_nothing_of_another(manifest):
        return "bind"
    if rebind:
        return "rebind"
    raise _refusal(root, recorded, current)


def _holds_nothing_of_another(manifest: dict[str, Any]) -> bool:
    """Whether a store that records no deployment may be bound by its first client.

    True when nothing is stored yet, or when this pmtk created the store and its only
    records were written by upsert/apply_changes (no client, so no deployment to
    record): there is nothing of another deployment to mix.
    """
    return not _holds_data(manifest) or (
        DEPLOYMENT_KEY in manifest and manifest[DEPLOYMENT_KEY] is None
    )


def _refusal(root: Path, recorded: Deployment | None, current: Deployment) -> WrongDeployment:
    """The error for a store of another deployment, or of an unrecorded one."""
    if recorded is None:
        msg = (
            f"refused: the store at {root} records no deployment (written by an earlier pmtk), "
            f"so pmtk cannot tell whether its data comes from {current.describe()}; nothing "
            f"was written. {_fix(root, current)}"
        )
        return WrongDeployment(msg)
    msg = (
        f"refused: the store at {root} holds data of {recorded.describe()}, not of "
        f"{current.describe()}; nothing was written. {_fix(root, current)}"
    )
    return WrongDeployment(msg)


DISCARDING = "discarding"
"""The manifest key set while a rebind's old data is being deleted (finished by the next writer)."""

VIEW_FILE = re.compile(r"\.?[A-Za-z][A-Za-z0-9_\-]{0,63}\.parquet(\.tmp)?")
"""A file :func:`toolkit.store.raw.write_views` writes in ``views/`` (or its temporary)."""

WEBHOOK_FOLDERS = ("queue", "waiting", "dead")
"""The folders of ``.webhooks/`` holding the events a deployment announced."""

WEBHOOK_FILES = (
    "events-seen.json",
    "dead-evicted.json",
    "last-error.json",
    "journal.sqlite3",
    "journal.sqlite3-wal",
    "journal.sqlite3-shm",
)
"""The files of ``.webhooks/`` about the old deployment's events: which event numbers were
seen (kept, they would make the new deployment's first events look like replays and its
numbers look like gaps), how many dead letters were evicted, its last error, and the
journal of its changes (queued, waiting and dead, with SQLite's WAL and index files)."""


def discard_data(root: Path, manifest: dict[str, Any]) -> None:
    """Delete every data file of the old deployment after a rebind (the manifest names none).

    That is: every committed data file in a table folder that the manifest does not
    name (the old tables, and leftovers of earlier commits), the staged pages, the
    views written from the old records (``views/<name>.parquet``) and the webhook
    events the old deployment announced (``.webhooks/queue``, ``waiting``, ``dead``) with
    what the receiver noted of them (:data:`WEBHOOK_FILES`).
    Nothing is deleted through a link, nor outside these folders; a user's own file
    in ``views/`` that pmtk does not write is left. Called under the lock, after the
    manifest switched to the new deployment with ``"discarding": true``; the marker
    is removed last, so a crash half-way is finished by the next writer (:func:`finish_discard`).
    """
    named = _named_files(root, manifest)
    rmtree(root / STAGING)
    for folder in _table_folders(root):
        with contextlib.suppress(OSError):
            for path in folder.iterdir():
                if DATA_FILE_NAME.fullmatch(path.name) and path not in named:
                    path.unlink(missing_ok=True)
            if not any(folder.iterdir()):
                folder.rmdir()
    views = root / "views"
    if views.is_dir() and not views.is_symlink():
        with contextlib.suppress(OSError):
            for path in views.iterdir():
                if VIEW_FILE.fullmatch(path.name) and not path.is_symlink():
                    path.unlink(missing_ok=True)
    hooks = root / ".webhooks"
    if hooks.is_dir() and not hooks.is_symlink():
        for name in WEBHOOK_FOLDERS:
            if (hooks / name).is_dir():
                rmtree(hooks / name)
        for name in WEBHOOK_FILES:  # unlink removes a link itself, never its target
            with contextlib.suppress(OSError):
                (hooks / name).unlink(missing_ok=True)


def finish_discard(root: Path, manifest: dict[str, Any]) -> bool:
    """Finish a rebind's discard that a crash interrupted; whether one was pending."""
    if manifest.get(DISCARDING) is not True:
        return False
    discard_data(root, manifest)
    return True


def bind(root: Path, current: Any, *, rebind: bool = False) -> None:
    """Record ``current`` (a :class:`Deployment`) as the store's deployment, under the
    lock; refuse a store of another deployment unless ``rebind``.

    With ``rebind``, the manifest is first replaced by one of the new deployment that
    names no data, then the old files are deleted: at no point does the store claim
    one deployment while holding another's records.
    """
    if current is None:
        return
    manifest = load_manifest_for_write(root)
    if finish_discard(root, manifest):  # a rebind that a crash interrupted
        manifest.pop(DISCARDING, None)
        write_json(manifest_path(root), manifest, "recording the store's deployment")
    action = check_deployment(root, manifest, current, rebind=rebind)
    if action == "keep":
        return
    manifest[DEPLOYMENT_KEY] = current.to_json()
    if action == "rebind":
        manifest["resources"] = {}
        manifest.pop("events", None)  # the old deployment's webhook events
        manifest[DISCARDING] = True
    manifest["kind"] = STORE_KIND
    manifest["format"] = STORE_FORMAT
    write_json(manifest_path(root), manifest, "recording the store's deployment")
    if action == "rebind":
        discard_data(root, manifest)
        manifest.pop(DISCARDING, None)
        write_json(manifest_path(root), manifest, "recording the store's deployment")


def _named_files(root: Path, manifest: dict[str, Any]) -> set[Path]:
    """The data files the manifest names (kept), by the one path rule."""
    named: set[Path] = set()
    resources = manifest.get("resources")
    for rt, entry in (resources if isinstance(resources, dict) else {}).items():
        tables = entry.get("tables") if isinstance(entry, dict) else None
        for table, info in (tables if isinstance(tables, dict) else {}).items():
            if isinstance(info, dict) and path_problem(str(rt), str(table), info) is None:
                named.add(root / str(info["path"]))
    return named


def _table_folders(root: Path) -> list[Path]:
    """The folders of ``root`` named as a table pmtk writes (never a link)."""
    names = {v.name for rt, vs in views.VIEWS.items() for v in vs}
    names |= {raw_table(rt) for rt in views.VIEWS}
    found = []
    for name in sorted(names):
        folder = root / name
        if folder.is_dir() and not folder.is_symlink():
            found.append(folder)
    return found

"""Where a lake lives (a local folder or an S3-compatible URL) and the names allowed in it.

Every path pmtk reads or writes in a lake is built here from checked parts: a table
name and a deployment name must each *fully* match their rule (``re.fullmatch``, so
a trailing newline is refused too), and every data file a Delta log names must be a
relative ``deployment=<name>/part-...parquet`` path of that table's own partition.
Nothing else is ever opened, so a forged log entry (``../outside``, an absolute
path, another deployment's folder) is refused instead of followed.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from toolkit.errors import ConfigurationError
from toolkit.store.results import StoreError, StoreLinked

DEPLOYMENT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
"""A deployment's short name: lower-case letters, digits, ``_`` and ``-``; 1 to 63 long."""

TABLE_NAME = re.compile(r"_?[A-Za-z][A-Za-z0-9_]{0,80}")
"""A table's name (``Appointment``, ``appointment_participant``, ``_raw_Appointment``)."""

DATA_FILE = re.compile(
    r"deployment=(?P<deployment>[a-z0-9][a-z0-9_-]{0,62})/"
    r"part-[0-9]{5}-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-c[0-9]{3}"
    r"(?:\.[a-z0-9]+)?\.parquet"
)
"""The only data-file path a table may name: delta-rs's file in one deployment's partition."""

_S3_KEYS = {
    "endpoint": ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"),
    "access_key": ("AWS_ACCESS_KEY_ID",),
    "secret_key": ("AWS_SECRET_ACCESS_KEY",),
    "session_token": ("AWS_SESSION_TOKEN",),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
}


class LakeError(StoreError):
    """A lake cannot be used as asked (base of the lake's own errors)."""


class LakeDamaged(LakeError):
    """A lake's log or files are not what pmtk wrote: nothing was read from the bad part."""


def check_deployment_name(name: str) -> str:
    """``name`` if it is a valid deployment name, else :class:`ConfigurationError`."""
    if not isinstance(name, str) or DEPLOYMENT_NAME.fullmatch(name) is None:
        msg = (
            f"deployment name {name!r} is not allowed: use 1 to 63 lower-case letters, "
            "digits, '_' or '-', starting with a letter or digit (for example 'north-clinic')"
        )
        raise ConfigurationError(msg)
    return name


def check_table_name(name: str) -> str:
    if not isinstance(name, str) or TABLE_NAME.fullmatch(name) is None:
        msg = f"table name {name!r} is not a pmtk table name"
        raise LakeDamaged(msg)
    return name


def check_data_path(table: str, deployment: str, path: str) -> str | None:
    """Why ``path`` (as the table's Delta log names it) may not be read, or ``None``."""
    match = DATA_FILE.fullmatch(path) if isinstance(path, str) else None
    if match is None:
        return f"{table}: the log names {path!r}, which is not a data file of this table"
    if match["deployment"] != deployment:
        return f"{table}: the log names {path!r} for deployment {deployment!r}"
    return None


@dataclass(frozen=True)
class Location:
    """A lake's root: a local folder or ``s3://bucket/prefix``, with its storage options.

    Attributes
    ----------
    uri
        The root as given (a local path is made absolute).
    storage_options
        For an S3 URL, what delta-rs needs (``AWS_ENDPOINT_URL``, keys, region,
        ``AWS_ALLOW_HTTP``); taken from the keyword argument, else the environment.
    """

    uri: str
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def of(
        cls, lake: str | os.PathLike[str] | Location, storage_options: dict[str, str] | None = None
    ) -> Location:
        if isinstance(lake, Location):
            return lake
        text = os.fspath(lake)
        scheme = urlsplit(text).scheme.lower()
        if scheme in ("s3", "s3a"):
            options = dict(storage_options or {})
            for keys in _S3_KEYS.values():
                for key in keys:
                    if key not in options and os.environ.get(key):
                        options[key] = os.environ[key]
            endpoint = options.get("AWS_ENDPOINT_URL", "")
            if endpoint.startswith("http://"):
                options.setdefault("AWS_ALLOW_HTTP", "true")
            return cls(text.rstrip("/"), options)
        if scheme and len(scheme) > 1:
            msg = f"lake {text!r}: only a local folder or an s3:// URL is supported"
            raise ConfigurationError(msg)
        return cls(str(Path(text).absolute()), dict(storage_options or {}))

    @property
    def local(self) -> bool:
        return "://" not in self.uri

    def table_uri(self, *parts: str) -> str:
        for part in parts:
            if part in ("", ".", "..") or "/" in part or "\\" in part:
                msg = f"refused path part {part!r} under {self.uri}"
                raise LakeDamaged(msg)
        return "/".join([self.uri, *parts])

    def check_local_links(self, *parts: str) -> None:
        """Refuse a local lake folder that is a link (the root itself may be one)."""
        if not self.local:
            return
        path = Path(self.uri)
        for part in parts:
            path = path / part
            if path.is_symlink():
                msg = (
                    f"{path} is a symbolic link (to {os.readlink(path)}); pmtk reads and "
                    "writes no lake path through a link"
                )
                raise StoreLinked(msg)

    def read_bytes(self, table_uri: str, rel: str) -> bytes:
        """The bytes of a data file, ``rel`` being a path already checked by the caller."""
        return b"".join(self._chunks(table_uri, rel))

    def _chunks(self, table_uri: str, rel: str, size: int = 1 << 20) -> Iterator[bytes]:
        if self.local:
            full = Path(table_uri) / rel
            fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, "rb") as fh:
                while chunk := fh.read(size):
                    yield chunk
            return
        fs, root = self.filesystem(table_uri)
        with fs.open_input_stream(f"{root}/{rel}") as fh:
            while chunk := fh.read(size):
                yield bytes(chunk)

    def sha256(self, table_uri: str, rel: str) -> str:
        """The file's sha256, read a megabyte at a time (a data file can be hundreds of MB)."""
        digest = hashlib.sha256()
        for chunk in self._chunks(table_uri, rel):
            digest.update(chunk)
        return digest.hexdigest()

    def filesystem(self, table_uri: str) -> tuple[Any, str]:
        """A pyarrow filesystem for the table and the table's root in it (local or S3)."""
        from pyarrow import fs as pafs

        if self.local:
            return pafs.LocalFileSystem(), table_uri
        opts = self.storage_options
        parts = urlsplit(table_uri)
        endpoint = opts.get("AWS_ENDPOINT_URL") or opts.get("AWS_ENDPOINT_URL_S3")
        kwargs: dict[str, Any] = {
            "access_key": opts.get("AWS_ACCESS_KEY_ID"),
            "secret_key": opts.get("AWS_SECRET_ACCESS_KEY"),
            "session_token": opts.get("AWS_SESSION_TOKEN"),
            "region": opts.get("AWS_REGION") or opts.get("AWS_DEFAULT_REGION") or "us-east-1",
        }
        if endpoint:
            ep = urlsplit(endpoint)
            kwargs["endpoint_override"] = ep.netloc
            kwargs["scheme"] = ep.scheme or "https"
        fs = pafs.S3FileSystem(**{k: v for k, v in kwargs.items() if v is not None})
        return fs, f"{parts.netloc}{parts.path}"

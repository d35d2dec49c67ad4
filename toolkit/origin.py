"""The configured origin: the only scheme, host and port a request may go to.

The first and last layers of the request pipeline (:mod:`toolkit.http`) both check
it: :meth:`Origin.resolve` resolves a path, a ``next`` link or a redirect against
the base URL and refuses (:class:`~toolkit.errors.ForeignLink`, before a byte is
sent) one that leaves the origin; :class:`toolkit.transport.GuardedTransport`
checks every request again below httpx's auth. :func:`safe_id` checks an id
before it becomes a path segment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx

from toolkit.errors import ForeignLink, InvalidId

__all__ = ["DEFAULT_PORTS", "Origin", "display_url", "safe_id"]

DEFAULT_PORTS = {"http": 80, "https": 443}
"""The port of a URL that names none, by scheme."""

_ID = re.compile(r"[A-Za-z0-9\-.]{1,64}")
_UNSAFE_LINK = re.compile(r"[\\\x00-\x20\x7f]")


def safe_id(resource_type: str, record_id: object) -> str:
    """``record_id`` if it is safe as one URL path segment, else :class:`InvalidId`.

    The FHIR id shape the catalogue uses (letters, digits, ``-`` and ``.``, at
    most 64), minus ids made of dots only: ``.`` and ``..`` are path steps, and
    ``client.patch("Referral", "..", ...)`` would otherwise patch ``/main``.

    Examples
    --------
    >>> safe_id("Organization", "CL-2")
    'CL-2'
    >>> safe_id("Referral", "..")
    Traceback (most recent call last):
    ...
    toolkit.errors.InvalidId: '..' is not a Referral id: ...
    """
    if not isinstance(record_id, str) or not _ID.fullmatch(record_id) or not record_id.strip("."):
        msg = (
            f"{record_id!r} is not a {resource_type} id: an id is 1 to 64 letters, digits, "
            "'-' or '.', not only dots (no '/', '?', '#', '%', spaces or control characters); "
            "nothing was sent"
        )
        raise InvalidId(msg)
    return record_id


def display_url(url: httpx.URL | str) -> str:
    """A URL for messages: userinfo dropped (it may hold a password)."""
    try:
        parsed = httpx.URL(str(url))
    except httpx.InvalidURL:
        return repr(str(url))[1:-1][:200]
    return str(parsed.copy_with(username=None, password=None))[:500]


@dataclass(frozen=True, slots=True)
class Origin:
    """The configured origin: scheme, host and port. Credentials go nowhere else.

    Examples
    --------
    >>> o = Origin.of("https://au-api.halaxy.com/main")
    >>> o.resolve("https://au-api.halaxy.com/main/Referral", "https://au-api.halaxy.com/main/x")
    'https://au-api.halaxy.com/main/Referral'
    >>> o.resolve("//evil.example/steal", "https://au-api.halaxy.com/main/x")
    Traceback (most recent call last):
    ...
    toolkit.errors.ForeignLink: ...
    """

    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> Origin:
        """The origin of a base URL."""
        parsed = httpx.URL(url)
        scheme = parsed.scheme.lower()
        return cls(scheme, parsed.host.lower(), parsed.port or DEFAULT_PORTS.get(scheme, 0))

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def check(self, url: httpx.URL, *, what: str = "URL") -> None:
        """Raise :class:`ForeignLink` unless ``url`` is on this origin, without userinfo."""
        scheme = url.scheme.lower()
        port = url.port or DEFAULT_PORTS.get(scheme, 0)
        problem = None
        if url.userinfo:
            problem = "it carries userinfo (user@host), which can hide the real host"
        elif scheme == "http" and self.scheme == "https":
            problem = "it downgrades https to http"
        elif (scheme, url.host.lower(), port) != (self.scheme, self.host, self.port):
            problem = "it leads to another scheme, host or port"
        if problem is not None:
            msg = (
                f"refusing {what} {display_url(url)}: {problem}; credentials go only to "
                f"the configured origin {self}, so it was not requested"
            )
            raise ForeignLink(msg, url=display_url(url), origin=str(self))

    def resolve(self, link: str, base: str, *, what: str = "link") -> str:
        """``link`` resolved against ``base`` and checked; the URL to request.

        Relative links, absolute links on the origin and ``//host`` links are
        resolved as a browser would. Backslashes, whitespace and control
        characters are refused outright: parsers disagree on them (``\\`` is a
        ``/`` to some), which is how a link smuggles in another host.
        """
        if _UNSAFE_LINK.search(link):
            msg = (
                f"refusing {what} {link[:200]!r}: it contains a backslash, whitespace or a "
                f"control character; credentials go only to {self}, so it was not requested"
            )
            raise ForeignLink(msg, url=repr(link[:200]), origin=str(self))
        try:
            url = httpx.URL(base).join(link)
        except (httpx.InvalidURL, ValueError) as exc:
            msg = f"refusing {what} {link[:200]!r}: not a URL ({exc}); it was not requested"
            raise ForeignLink(msg, url=repr(link[:200]), origin=str(self)) from None
        self.check(url, what=what)
        return str(url)

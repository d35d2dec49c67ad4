"""One name for the webhook authentication header, read by ``pmtk mock`` and ``pmtk listen``.

``--auth-header NAME:VALUE`` or the environment variable ``PM_WEBHOOK_AUTH``. The names
used before (``PM_WEBHOOK_AUTH_HEADER``, and ``pmtk mock --webhook-header``) are still
read, with a notice on stderr naming the new one (a printed line, not a Python
warning: a command's users read stderr, and a warning filter may turn it into an error).
"""

from __future__ import annotations

import os
import sys

AUTH_ENV = "PM_WEBHOOK_AUTH"
"""The environment variable both commands read."""

OLD_AUTH_ENV = "PM_WEBHOOK_AUTH_HEADER"
"""The variable ``pmtk mock`` read before; still read, with a deprecation notice."""


def _notice(command: str, old: str, new: str) -> None:
    print(
        f"{command}: {old} is deprecated and will be removed; use {new} (the same "
        "NAME:VALUE) instead",
        file=sys.stderr,
        flush=True,
    )


def auth_setting(
    option: str | None,
    *,
    command: str,
    old_option: str | None = None,
    old_option_name: str = "--webhook-header",
) -> str | None:
    """The ``NAME:VALUE`` to use: ``--auth-header``, else the deprecated option, else
    ``PM_WEBHOOK_AUTH``, else the deprecated ``PM_WEBHOOK_AUTH_HEADER`` (``None``: none).

    An explicit option wins over the environment, the new name over the old one.
    """
    if option:
        return option
    if old_option:
        _notice(command, old_option_name, "--auth-header")
        return old_option
    current = os.environ.get(AUTH_ENV)
    if current:
        return current
    old = os.environ.get(OLD_AUTH_ENV)
    if old:
        _notice(command, OLD_AUTH_ENV, AUTH_ENV)
        return old
    return None

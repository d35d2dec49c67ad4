"""Keep a store fresh without polling: a webhook receiver that applies each change.

The live service announces changes as webhooks (``public-docs-facts.md``, "Events"):
Patient create and update, Appointment and Invoice create, update and delete. Each
call's body is a FHIR Bundle of type ``history`` whose first entry is a
``SubscriptionStatus``; its ``notificationEvent[].focus`` references the changed
record. This module receives them and keeps a :mod:`toolkit.store` current::

    POST /<any path> --(auth header? size? history Bundle?)--> .webhooks/queue/<seq>.json
         (fsynced)   --> 202 Accepted
    worker thread: queue --(GET /main/<type>/<id>, one per changed record)-->
         toolkit.store.apply_changes (newest meta.lastUpdated wins) --> queue file removed

Why a queue on disk before the answer: the sender treats 202 as "delivered" and
will not send the event again, so an event must survive a crash from the moment
it is acknowledged. The worker removes a queue file only after the manifest
that includes its change is committed; a crash in between applies it again,
which is harmless (a GET of the current version, merged by id).

Why a GET instead of the payload: the payload may carry only the reference,
and the current version is what the store wants; a late or duplicated event
then fetches the same (or a newer) version, so order does not matter. A record
that answers 404 is removed from the store, whatever the event said. A delete
event (``request.method`` ``DELETE`` for the focus in the Bundle, or a topic or
event code naming a delete) removes the record without a request.

On start, :func:`listen` runs an incremental :func:`toolkit.store.sync` of the
announced resources, so changes made while the receiver was down are covered.
"""

from __future__ import annotations

from toolkit.webhooks.command import listen as listen
from toolkit.webhooks.command import listen_command as listen_command
from toolkit.webhooks.events import ANNOUNCED as ANNOUNCED
from toolkit.webhooks.events import DEFAULT_MAX_BODY_BYTES as DEFAULT_MAX_BODY_BYTES
from toolkit.webhooks.events import DEFAULT_MAX_QUEUE_BYTES as DEFAULT_MAX_QUEUE_BYTES
from toolkit.webhooks.events import MEDIA_TYPES as MEDIA_TYPES
from toolkit.webhooks.events import WEBHOOK_DIR as WEBHOOK_DIR
from toolkit.webhooks.events import Event as Event
from toolkit.webhooks.events import NotificationError as NotificationError
from toolkit.webhooks.events import parse_notification as parse_notification
from toolkit.webhooks.listener import Listener as Listener
from toolkit.webhooks.listener import disk_status as disk_status
from toolkit.webhooks.queue import AuthHeader as AuthHeader
from toolkit.webhooks.queue import Change as Change
from toolkit.webhooks.queue import EventQueue as EventQueue
from toolkit.webhooks.queue import ListenerStats as ListenerStats

__all__ = [
    "ANNOUNCED",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_QUEUE_BYTES",
    "MEDIA_TYPES",
    "AuthHeader",
    "Change",
    "Event",
    "EventQueue",
    "Listener",
    "ListenerStats",
    "NotificationError",
    "disk_status",
    "listen",
    "listen_command",
    "parse_notification",
]

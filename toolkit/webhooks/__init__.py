"""Keep a store fresh without polling: a webhook receiver that applies each change.

The live service announces changes as webhooks (``public-docs-facts.md``, "Events"):
Patient create and update, Appointment and Invoice create, update and delete. Each
call's body is a FHIR Bundle of type ``history`` whose first entry is a
``SubscriptionStatus``; its ``notificationEvent[].focus`` references the changed
record. This module receives them and keeps a :mod:`toolkit.store` current::

    POST /<any path> --(Host served? auth header? JSON? ids the client accepts? room?)-->
         a row of .webhooks/journal.sqlite3, state "queued" (committed, synced) --> 202
         (deliveries arriving together share one transaction: a group commit)
    the worker (one per journal): due rows --(GET /main/<type>/<id>, one per record)-->
         toolkit.store.apply_changes (newest meta.lastUpdated wins) --> rows removed
         a failed read: queued again with backoff; past the bound: a dead letter
         a type no sync made a table of: "waiting" until one has

Why a journal on disk before the answer: the sender treats 202 as "delivered" and
will not send the event again, so an event must survive a crash from the moment
it is acknowledged; and the receiver answers 503 with ``Retry-After`` instead of
202 whenever it cannot keep that promise (the worker restarting, the journal at its
byte cap). A row goes only after the store's commit that includes its change, or
after the change it could not apply is queued again, waiting or dead; a crash in
between applies it again, which is harmless (:mod:`toolkit.webhooks.journal`).

Why a GET instead of the payload: the payload may carry only the reference,
and the current version is what the store wants; a late or duplicated event
then fetches the same (or a newer) version, so order does not matter. A record
that answers 404 or 410 is removed from the store, and a delete event is applied
only then (a record still served is applied as an update), so a forged delete
changes nothing. Only the API's own answer deletes: a 404/410 whose body is a FHIR
OperationOutcome sent as FHIR JSON; a gateway's HTML 404 page is a failed read.

Every event once: ``.webhooks/events-seen.json`` (:mod:`toolkit.webhooks.eventlog`)
keeps the (subscription, eventNumber) pairs, or body digests, already queued; a
replay is answered 202 without a read, and numbers that never arrive are healed by a
sync after a grace period. The receiver answers only the ``Host`` names it serves
(421 otherwise: DNS rebinding), and ``/status`` needs the webhook's authentication.

On start, :func:`listen` catches up on the announced resources the store holds (an
incremental walk from the store's bound, :mod:`toolkit.webhooks.catchup`), so changes
made while the receiver was down are covered. A second receiver of one store is
refused; ``take_over=True`` (``pmtk listen --take-over``) replaces the running one
without a pause (:mod:`toolkit.webhooks.handover`).
"""

from __future__ import annotations

from toolkit.webhooks.command import listen_command as listen_command
from toolkit.webhooks.events import ANNOUNCED as ANNOUNCED
from toolkit.webhooks.events import DEFAULT_MAX_BODY_BYTES as DEFAULT_MAX_BODY_BYTES
from toolkit.webhooks.events import DEFAULT_MAX_QUEUE_BYTES as DEFAULT_MAX_QUEUE_BYTES
from toolkit.webhooks.events import MEDIA_TYPES as MEDIA_TYPES
from toolkit.webhooks.events import WEBHOOK_DIR as WEBHOOK_DIR
from toolkit.webhooks.events import Event as Event
from toolkit.webhooks.events import NotificationError as NotificationError
from toolkit.webhooks.events import parse_notification as parse_notification
from toolkit.webhooks.journal import EventQueue as EventQueue
from toolkit.webhooks.listener import Listener as Listener
from toolkit.webhooks.queue import AuthHeader as AuthHeader
from toolkit.webhooks.queue import Change as Change
from toolkit.webhooks.queue import ListenerStats as ListenerStats
from toolkit.webhooks.serve import listen as listen
from toolkit.webhooks.status import disk_status as disk_status

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

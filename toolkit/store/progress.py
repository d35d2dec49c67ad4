"""The live progress display of ``pmtk sync`` (rich), and what it says about the target."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

from toolkit import retries
from toolkit.store.results import PageProgress, ResourceSync

DisplayMode = Literal["bars", "lines", "off"]


NOTICE_MIN_WAIT = 1.0
"""Shortest wait written as a line in ``"lines"`` mode (pacing makes many tiny waits)."""


_CONNECT_CAUSES = ("ConnectError", "ConnectTimeout", "PoolTimeout")


STATUS_WIDTH = 36
"""Cells of the bar, given to a status in its place: "waiting 49 s: rate limit (429)" fits,
and a whole line (name, bar, ``1458/1458 records``, clock) fits 80 columns."""


class _StatusColumn:
    """Factory of a rich column showing the bar, or in its place why the bar is not moving.

    The status takes the bar's place (not a column of its own at the end of the line):
    on an 80-column terminal a last column is squeezed to nothing, and a sync that
    waited 58 s for the rate limit looked frozen.
    """

    @staticmethod
    def make() -> Any:
        from rich.progress import BarColumn, ProgressColumn
        from rich.text import Text

        class StatusColumn(ProgressColumn):
            def __init__(self) -> None:
                super().__init__()
                self.bar = BarColumn(bar_width=STATUS_WIDTH)

            def render(self, task: Any) -> Any:
                render = task.fields.get("status")
                text = render(time.monotonic()) if callable(render) else ""
                if not text:
                    return self.bar.render(task)
                return Text(
                    text.ljust(STATUS_WIDTH), style="yellow", overflow="ellipsis", no_wrap=True
                )

        return StatusColumn()


class SyncProgress:
    """What a sync shows while it runs: a bar per resource with a status, or notice lines.

    The status says why the bar is not moving: ``waiting 12 s: rate limit (429)``
    while the client waits out the rate limit (told by the throttle's
    :meth:`~toolkit.throttle.Throttle.subscribe` hook), and ``connecting to
    host:port (retry 2/5 in 1.5 s; ConnectError)`` while a request is retried
    (told by :func:`toolkit.retries.listen`). Text from servers is never read as
    rich markup.

    Parameters
    ----------
    mode
        ``"bars"``: live progress bars (for a terminal); ``"lines"``: one plain
        line per retry and per wait of at least :data:`NOTICE_MIN_WAIT` seconds
        (for logs and pipes); ``"off"``: nothing.
    console
        Where to draw (default: a :class:`rich.console.Console` on stderr).

    Attributes
    ----------
    failures
        The failed resources reported so far (:class:`ResourceSync` with ``error``).
    """

    def __init__(self, mode: DisplayMode = "bars", *, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import (
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        if mode not in ("bars", "lines", "off"):
            msg = f"mode must be 'bars', 'lines' or 'off', got {mode!r}"
            raise ValueError(msg)
        self.mode: DisplayMode = mode
        self.console = console if console is not None else Console(stderr=True, soft_wrap=True)
        self.progress = Progress(
            TextColumn("{task.description:<14}", markup=False),
            _StatusColumn.make(),
            MofNCompleteColumn(),
            TextColumn("records"),
            TimeElapsedColumn(),
            console=self.console,
            disable=mode != "bars",
        )
        self._tasks: dict[str, Any] = {}
        self._current: str | None = None
        self._origin: str | None = None
        self._attempts: int | None = None
        self.failures: list[ResourceSync] = []
        self.progressed = False
        """Whether any page was staged or any resource ended in this run."""
        self._wait_until = 0.0

    def __enter__(self) -> SyncProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # Every bar ends: one still running (Ctrl-C, an error that stopped the run)
        # stops its clock, so no line is left counting.
        for task in self.progress.tasks:
            if not task.finished:
                self.progress.stop_task(task.id)
        self.progress.stop()

    # -- what the sync reports -------------------------------------------------------

    def start(self, resource_type: str) -> None:
        """A resource's sync begins."""
        self._current = resource_type
        self._tasks[resource_type] = self.progress.add_task(resource_type, total=None, status=None)

    def __call__(self, event: PageProgress) -> None:
        """A page was staged: move the bar and clear any waiting state that has passed.

        A wait announced for the next request (the server said no requests are left
        in this window, as it answered the page) outlives the page: it stays on the bar.
        """
        self.progressed = True
        task = self._tasks.get(event.resource)
        if task is not None:
            fields: dict[str, Any] = {"completed": event.records, "total": event.total}
            if time.monotonic() >= self._wait_until:
                fields["status"] = None
            self.progress.update(task, **fields)

    def resumed(self, resource_type: str, pages: int, records: int) -> None:
        """A resource's sync resumes from ``pages`` staged pages (``records`` records)."""
        line = f"resuming after page {pages} ({records:,} records kept)"
        task = self._tasks.get(resource_type)
        if task is not None:
            self.progress.update(task, completed=records)
        self._status(lambda now: line, True, line)

    def done(self, result: ResourceSync) -> None:
        """A resource was committed (or found unchanged): its bar ends, its clock stops."""
        self.progressed = True
        task = self._tasks.get(result.resource)
        if task is not None:
            known = self.progress.tasks[task].total
            # After a resume the server may not repeat its total: the bar ends on the
            # records fetched instead of staying at "2726/?" with its clock running.
            completed = known if known is not None else max(result.fetched, 0)
            # Rich stops a bar's clock when its count first reaches the total (the last
            # page), which left 0:00:00 on resources whose time went to waits and the
            # merge after it: the clock stops here instead, at the resource's end, as the
            # summary's elapsed does.
            self.progress.tasks[task].finished_time = None
            self.progress.update(task, completed=completed, total=completed, status=None)
            self.progress.stop_task(task)

    def failed(self, result: ResourceSync) -> None:
        """A resource failed; ``result.error`` says why, on one line; its clock stops."""
        self.failures.append(result)
        task = self._tasks.get(result.resource)
        if task is not None:
            reason = f"failed: {result.error}"
            self.progress.update(task, status=lambda now: reason)
            self.progress.stop_task(task)

    # -- why nothing moves -----------------------------------------------------------

    def wait(self, seconds: float, reason: str) -> None:
        """The client waits ``seconds`` before its next request, for ``reason``."""
        until = time.monotonic() + seconds
        self._wait_until = until

        def render(now: float) -> str:
            left = until - now
            return f"waiting {left:.0f} s: {reason}" if left > 0 else ""

        self._status(render, seconds >= NOTICE_MIN_WAIT, f"waiting {seconds:.0f} s: {reason}")

    def retry(self, notice: Any) -> None:
        """A request failed and is retried (a :class:`toolkit.retries.RetryNotice`)."""
        url = getattr(notice, "url", None)
        if url is not None and self._origin is not None and _origin(url) != self._origin:
            return  # another client's retry
        host = _host(url) if url is not None else (self._origin or "the deployment")
        n, wait, cause = notice.retry, notice.wait, notice.cause
        of = f"/{self._attempts - 1}" if self._attempts and self._attempts > 1 else ""
        connecting = cause in _CONNECT_CAUSES
        until = time.monotonic() + wait

        def text(left: float | None) -> str:
            timing = f" in {left:.1f} s" if left is not None else ""
            if connecting:
                return f"connecting to {host} (retry {n}{of}{timing}; {cause})"
            return f"{host} answered {cause} (retry {n}{of}{timing})"

        def render(now: float) -> str:
            left = until - now
            return text(left if left > 0 else None)

        self._status(render, True, text(wait))

    def _status(self, render: Callable[[float], str], as_line: bool, line: str) -> None:
        resource = self._current
        if self.mode == "lines" and as_line:
            from rich.text import Text

            prefix = f"{resource}: " if resource else ""
            self.console.print(Text(prefix + line))
        task = self._tasks.get(resource) if resource is not None else None
        if task is not None:
            self.progress.update(task, status=render)

    def status(self, resource_type: str) -> str:
        """The status text shown now beside ``resource_type``'s bar (``""`` when none)."""
        task = self._tasks.get(resource_type)
        if task is None:
            return ""
        render = self.progress.tasks[task].fields.get("status")
        return render(time.monotonic()) if callable(render) else ""

    @contextlib.contextmanager
    def attach(self, client: Any) -> Iterator[None]:
        """Listen to ``client``'s throttle waits and retries for the duration of the block."""

        base_url = getattr(client, "base_url", None)
        self._origin = _origin(base_url) if isinstance(base_url, str) else None
        policy = getattr(client, "retry_policy", None)
        attempts = getattr(policy, "attempts", None)
        self._attempts = attempts if isinstance(attempts, int) else None
        throttle = getattr(client, "throttle", None)
        subscribe = getattr(throttle, "subscribe", None)
        unsubscribe = subscribe(self.wait) if callable(subscribe) else None
        try:
            with retries.listen(self.retry):
                yield
        finally:
            if callable(unsubscribe):
                unsubscribe()


def _origin(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.lower()}"


def _host(url: str) -> str:
    from urllib.parse import urlsplit

    return urlsplit(url).netloc or url

"""The test controls (``/_pmtk/...``): faults, clock, touch and delete."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from toolkit.mock.app.core import MockCore
from toolkit.mock.app.records import release_slot
from toolkit.mock.app.responses import (
    Problem4xx,
    error,
)
from toolkit.mock.faults import FAULT_PROFILES


class ControlRoom(MockCore):
    """The test controls (``/_pmtk/...``): faults, clock, touch and delete."""

    # ------------------------------------------------------------------ test controls
    def controls_enabled(self) -> None:
        if not self.state.options.test_controls:
            raise Problem4xx(404, "not-found", "test controls are off")

    async def control(self, request: Request) -> Response:
        """``/main/_test/<action>``: the test controls, each one method on one action."""
        try:
            self.controls_enabled()
            action = request.path_params["action"]
            handler = self._controls().get((action, request.method))
            if handler is None:
                raise Problem4xx(404, "not-found", f"no test control {request.method} {action}")
            result = await handler(request)
        except Problem4xx as problem:
            return error(problem.status, problem.code, problem.diagnostics)
        return Response(orjson.dumps(result), media_type="application/json")

    def _controls(self) -> dict[tuple[str, str], Callable[[Request], Awaitable[Any]]]:
        """``(action, method)`` -> the control's handler."""
        state = self.state

        async def reset_rate_limit(_: Request) -> Any:
            state.reset_rate_limit()
            return {"reset": True}

        async def faults(_: Request) -> Any:
            profiles = {n: p.description for n, p in FAULT_PROFILES.items()}
            return {"profile": state.fault.name, "profiles": profiles}

        async def stats(_: Request) -> Any:
            return state.stats()

        async def reset_stats(_: Request) -> Any:
            state.reset_stats()
            return {"reset": True}

        async def touch(request: Request) -> Any:
            return self._touch(await self.json_object(request))

        async def pending(_: Request) -> Any:
            return state.pending()

        async def delete(request: Request) -> Any:
            return self._delete(await self.json_object(request))

        async def clear(_: Request) -> Any:
            state.clear_triggers()
            return state.pending()

        return {
            ("clock", "POST"): self._advance_clock,
            ("rate-limit/reset", "POST"): reset_rate_limit,
            ("fault", "PUT"): self._set_fault,
            ("fault", "GET"): faults,
            ("stats", "GET"): stats,
            ("stats/reset", "POST"): reset_stats,
            ("touch", "POST"): touch,
            ("touch", "GET"): pending,
            ("delete", "POST"): delete,
            ("touch", "DELETE"): clear,
        }

    async def _advance_clock(self, request: Request) -> Any:
        """``{"advance": <seconds>}``: move the virtual clock forward."""
        seconds = (await self.json_object(request)).get("advance")
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
        ):
            raise Problem4xx(400, "invalid", "advance must be a number of seconds")
        try:
            return self.state.advance_clock(float(seconds))
        except ValueError as exc:
            raise Problem4xx(400, "invalid", str(exc)) from None

    async def _set_fault(self, request: Request) -> Any:
        """``{"profile": <name> | null}``: switch a fault profile on (or all off)."""
        name = (await self.json_object(request)).get("profile")
        if name is not None and name not in FAULT_PROFILES:
            raise Problem4xx(400, "invalid", f"unknown fault profile {name!r}")
        self.state.set_fault(name)
        return {"profile": name}

    def _touch(self, body: dict[str, Any]) -> dict[str, Any]:
        """``{"type", "ids", "after_list_requests"?}``: touch now, or arm a touch."""
        rtype, ids = _type_and_ids(body)
        try:
            if "after_list_requests" in body:
                return self.state.arm_touch(rtype, ids, body["after_list_requests"])
            return self.state.touch(rtype, ids)
        except ValueError as exc:
            raise Problem4xx(400, "invalid", str(exc)) from None

    def _delete(self, body: dict[str, Any]) -> dict[str, Any]:
        """``{"type", "ids"}``: delete records as the product's user would."""
        rtype, ids = _type_and_ids(body)
        try:
            return self.state.delete(rtype, ids, release_slot=release_slot)
        except ValueError as exc:
            raise Problem4xx(400, "invalid", str(exc)) from None


def _type_and_ids(body: dict[str, Any]) -> tuple[str, list[str]]:
    """The ``type`` and ``ids`` of a touch or delete control (400 when either is malformed)."""
    rtype, ids = body.get("type"), body.get("ids")
    if not isinstance(rtype, str):
        raise Problem4xx(400, "invalid", "type must be a resource type name")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise Problem4xx(400, "invalid", "ids must be an array of record ids")
    return rtype, ids

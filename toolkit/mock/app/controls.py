"""The test controls (``/_pmtk/...``): faults, clock, touch and delete."""

from __future__ import annotations

import math
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from toolkit.mock.app.core import MockCore
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
        try:
            self.controls_enabled()
            action = request.path_params["action"]
            method = request.method
            state = self.state
            result: Any
            if action == "clock" and method == "POST":
                body = await self.json_object(request)
                seconds = body.get("advance")
                if (
                    isinstance(seconds, bool)
                    or not isinstance(seconds, int | float)
                    or not math.isfinite(seconds)
                ):
                    raise Problem4xx(400, "invalid", "advance must be a number of seconds")
                try:
                    result = state.advance_clock(float(seconds))
                except ValueError as exc:
                    raise Problem4xx(400, "invalid", str(exc)) from None
            elif action == "rate-limit/reset" and method == "POST":
                state.reset_rate_limit()
                result = {"reset": True}
            elif action == "fault" and method == "PUT":
                body = await self.json_object(request)
                name = body.get("profile")
                if name is not None and name not in FAULT_PROFILES:
                    raise Problem4xx(400, "invalid", f"unknown fault profile {name!r}")
                state.set_fault(name)
                result = {"profile": name}
            elif action == "fault" and method == "GET":
                result = {
                    "profile": state.fault,
                    "profiles": {n: p.description for n, p in FAULT_PROFILES.items()},
                }
            elif action == "stats" and method == "GET":
                result = state.stats()
            elif action == "stats/reset" and method == "POST":
                state.reset_stats()
                result = {"reset": True}
            elif action == "touch" and method == "POST":
                result = self._touch(await self.json_object(request))
            elif action == "touch" and method == "GET":
                result = state.pending()
            elif action == "delete" and method == "POST":
                result = self._delete(await self.json_object(request))
            elif action == "touch" and method == "DELETE":
                state.clear_triggers()
                result = state.pending()
            else:
                raise Problem4xx(404, "not-found", f"no test control {method} {action}")
        except Problem4xx as problem:
            return error(problem.status, problem.code, problem.diagnostics)
        return Response(orjson.dumps(result), media_type="application/json")

    def _touch(self, body: dict[str, Any]) -> dict[str, Any]:
        """``{"type", "ids", "after_list_requests"?}``: touch now, or arm a touch."""
        rtype, ids = body.get("type"), body.get("ids")
        if not isinstance(rtype, str):
            raise Problem4xx(400, "invalid", "type must be a resource type name")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise Problem4xx(400, "invalid", "ids must be an array of record ids")
        try:
            if "after_list_requests" in body:
                return self.state.arm_touch(rtype, ids, body["after_list_requests"])
            return self.state.touch(rtype, ids)
        except ValueError as exc:
            raise Problem4xx(400, "invalid", str(exc)) from None

    def _delete(self, body: dict[str, Any]) -> dict[str, Any]:
        """``{"type", "ids"}``: delete records as the product's user would."""
        rtype, ids = body.get("type"), body.get("ids")
        if not isinstance(rtype, str):
            raise Problem4xx(400, "invalid", "type must be a resource type name")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise Problem4xx(400, "invalid", "ids must be an array of record ids")
        try:
            return self.state.delete(rtype, ids)
        except ValueError as exc:
            raise Problem4xx(400, "invalid", str(exc)) from None

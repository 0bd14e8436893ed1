"""The model and provider requests (reference §12.3: `list_models`,
`list_connect_providers`) over `runtime/manage/models_ops`; provider records are tether-wide,
so listing them needs an unscoped token, and no answer ever carries a key."""

from __future__ import annotations

from typing import Any

from tether.errors import UsageError
from tether.runtime.manage import models_ops
from tether.server.request_kit import Call, Request, Scope, request


def list_models(call: Call) -> dict[str, Any]:
    return models_ops.list_models(call.home, call.env)


def list_connect_providers(call: Call) -> dict[str, Any]:
    target = call.opt_text("target") or "local"
    if target != "local":
        raise UsageError(f"target must be 'local' (this server keeps providers locally), "
                         f"not {target!r}")
    return {"target": target, "providers": models_ops.list_providers(call.home, call.env)}


FAMILY: dict[str, Request] = {
    "list_models": request("", list_models, Scope.OPEN, {"entries": []}, blocking=True),
    "list_connect_providers": request(
        "target", list_connect_providers, Scope.UNSCOPED, {"target": "local", "providers": []}
    ),
}

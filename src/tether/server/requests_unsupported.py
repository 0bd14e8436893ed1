"""The requests the reference lists that tether has nothing behind (reference §12.3):
`chatgpt_usage_read` (tether connects no ChatGPT subscription: providers are API keys or base
URLs, no OAuth) and `get_experiments` / `set_experiment` (tether has no experiment flags). Each
is answered, in the reference's response shape, with `success: false` and an error saying so,
never as an unknown frame; their capabilities (`requests.CAPABILITIES`) stay false."""

from __future__ import annotations

from typing import Any

from tether.server.request_kit import Call, Request, Scope, request

NO_CHATGPT = ("tether has no ChatGPT subscription provider (providers connect by API key or base "
              "URL, without OAuth), so there is no ChatGPT usage to read")
NO_EXPERIMENTS = "tether has no experiments to list or set"


def chatgpt_usage_read(call: Call) -> dict[str, Any]:
    target = call.opt_text("target") or "local"
    if target not in ("local", "api"):
        raise call.read.fail("target", "must be local or api")
    call.opt_text("provider_name")
    call.flag("force_refresh")
    # The reference's error here is an object: {code, message}.
    return {"success": False, "target": target,
            "error": {"code": "not_connected", "message": NO_CHATGPT}}


def experiments(call: Call) -> dict[str, Any]:
    if call.frame.kind == "set_experiment":
        call.text("experiment_id")
        call.flag("enabled")
    return {"success": False, "experiments": [], "error": NO_EXPERIMENTS}


FAMILY: dict[str, Request] = {
    "chatgpt_usage_read": request(
        "target provider_name force_refresh", chatgpt_usage_read, Scope.OPEN,
        {"target": "local"}, echo=("target",), supported=False,
    ),
    "get_experiments": request("", experiments, Scope.OPEN, {"experiments": []},
                               supported=False),
    "set_experiment": request("experiment_id enabled", experiments, Scope.OPEN,
                              {"experiments": []}, supported=False),
}

"""The AskUserQuestion tool: multiple-choice questions the person at the frontend answers.

As in the Claude Agent SDK, the answer arrives through the approval: the call always needs one,
and the TUI's dialog or the SDK's `can_use_tool` reply allows it with `updatedInput` holding the
questions plus `answers` ({question text: chosen label(s) or free text}); the tool then hands
the answers to the model. A runtime may instead put an async `ask_user(questions) -> answers`
callable in `services.ask_user`. One-shot headless runs never offer the tool (no one to ask).
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.errors import ToolFailure
from tether.tools.output import error_result

MAX_QUESTIONS = 4
MAX_OPTIONS = 4

DESCRIPTION = """\
Asks the user 1-4 multiple-choice questions when you need their decision. Each has a short \
`header`, 2-4 `options` ({label, description}) and `multiSelect`; the user may also type an \
answer of their own."""

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "questions": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_QUESTIONS,
            "items": {
                "type": "object",
                "properties": {
                    "question": {"type": "string"},
                    "header": {"type": "string"},
                    "options": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "label": {"type": "string"},
                                "description": {"type": "string"},
                            },
                            "required": ["label"],
                        },
                    },
                    "multiSelect": {"type": "boolean"},
                },
                "required": ["question", "header", "options", "multiSelect"],
            },
        },
        "answers": {"type": "object", "description": "Filled in by the user's frontend"},
    },
    "required": ["questions"],
    "additionalProperties": False,
}


def parse_questions(value: object) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise ToolFailure("Argument `questions` must be a non-empty list of question objects.")
    if len(value) > MAX_QUESTIONS:
        raise ToolFailure(f"Ask at most {MAX_QUESTIONS} questions at once (got {len(value)}).")
    out: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise ToolFailure(f"questions[{index}] must be an object.")
        question = item.get("question")
        if not isinstance(question, str) or not question.strip():
            raise ToolFailure(f"questions[{index}].question must be a non-empty string.")
        options = item.get("options")
        if not isinstance(options, list) or not 1 <= len(options) <= MAX_OPTIONS:
            raise ToolFailure(f"questions[{index}].options must be a list of 1-{MAX_OPTIONS} options.")
        labels: list[dict[str, str]] = []
        for o_index, option in enumerate(options):
            label = option.get("label") if isinstance(option, Mapping) else option
            if not isinstance(label, str) or not label.strip():
                raise ToolFailure(f"questions[{index}].options[{o_index}].label must be a string.")
            described = option.get("description", "") if isinstance(option, Mapping) else ""
            labels.append({"label": label, "description": str(described or "")})
        out.append({
            "question": question,
            "header": str(item.get("header") or "")[:40],
            "options": labels,
            "multiSelect": item.get("multiSelect") is True,
        })  # fmt: skip
    return out


def format_answers(questions: list[dict[str, Any]], answers: Mapping[str, Any]) -> str:
    parts: list[str] = []
    for q in questions:
        answer = answers.get(q["question"])
        if isinstance(answer, list):
            answer = ", ".join(str(a) for a in answer)
        shown = str(answer) if answer not in (None, "") else "(no answer)"
        parts.append(f'"{q["question"]}"="{shown}"')
    return (
        "User has answered your questions: " + ", ".join(parts) + ". You can now continue with "
        "the user's answers in mind."
    )


AskClient = Callable[[str, dict[str, Any]], Awaitable[Mapping[str, Any]]]


def ask_through_client(ask_client: AskClient) -> Callable[[list[dict[str, Any]]], Awaitable[Any]]:
    """`services.ask_user` for an SDK peer: the questions go out as a `can_use_tool` control
    request for AskUserQuestion (what the SDK already answers), the answers come back in
    `updatedInput.answers`; used when no approval carried them (a mode that allowed the call)."""
    counter = itertools.count(1)

    async def ask(questions: list[dict[str, Any]]) -> Any:
        request_id = f"ask-{next(counter)}"
        from tether.protocol import wire

        request = wire.can_use_tool(
            tool_name="AskUserQuestion", tool_call_id=request_id, args={"questions": questions}
        )
        try:
            response = await ask_client(request_id, request)
        except EOFError:
            return None
        body = response.get("response", response) if isinstance(response, Mapping) else {}
        if not isinstance(body, Mapping) or body.get("behavior") != "allow":
            return None
        updated = body.get("updatedInput")
        return updated.get("answers") if isinstance(updated, Mapping) else None

    return ask


class AskUserQuestionTool:
    name = "AskUserQuestion"
    description = DESCRIPTION
    parameters = PARAMETERS
    effect = Effect.READ

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            questions = parse_questions(args.get("questions"))
        except ToolFailure as exc:
            return error_result(str(exc))
        answers = args.get("answers")
        if answers is None and callable(ask := ctx.services.ask_user):
            answers = await ask(questions)
        if not isinstance(answers, Mapping) or not answers:
            return error_result(
                "The user did not answer (no frontend here can show the questions). Continue "
                "with your best judgement and state the assumption you made."
            )
        return ToolResult(format_answers(questions, answers))

"""write_stdin's half of `decide()`: input typed into a running exec_command session.

The call carries no command of its own: its text is input to the program the session runs, in
that program's language (a pager's `!cmd`, `ed`, `python3 -i`), which no rule for the session's
first command covers. So a confined session stays in its read-only sandbox, polling and
interrupt keys inherit the session's admission, and any other input is decided as a new command
(`tools/exec_command.py` says why this design).
"""

from __future__ import annotations

from dataclasses import replace

from tether.core.permissions.checker import (
    SESSION_ALLOWED,
    SESSION_CONFINED,
    Call,
    Policy,
    RuleSet,
    _tool_rule,
)
from tether.core.permissions.modes import Decision
from tether.core.permissions.rules import SHELL_FAMILY, Rule


def decide_session_write(call: Call, family: str, policy: Policy) -> Decision:
    """write_stdin carries no command of its own: its text is input to the program the session
    runs, in that program's language (a pager's `!cmd`, `ed`, `python3 -i`), which no rule for
    the session's first command covers. Deny and alwaysAsk rules bind, strict asks (unless a
    rule admits the tool); no such session is an error, never a prompt. A confined session stays
    in the read-only sandbox it runs in; polling and interrupt keys inherit the session's
    admission. Any other input is a new command (`_decide_session_input`)."""
    rules, scope = policy.rules, policy.scope
    sid = call.args.get("session_id")
    for rule in rules.denies:
        if _tool_rule(rule, family, call, (), scope, deny=True):
            return Decision("deny", f"Permission denied by rule: {rule}", rule.text)
    if call.session not in (SESSION_ALLOWED, SESSION_CONFINED):
        return Decision("deny", f"No running exec_command session {sid}: start one with "
                                "exec_command, then write to the session id it returns")
    for rule in rules.always_ask:
        if _tool_rule(rule, family, call, (), scope, deny=True):
            return Decision("ask", f"{rule} always asks", rule.text, sticky=True)
    if policy.mode == "strict":
        for rule in (*rules.cli_allow, *rules.session_allow, *rules.allow):
            if _tool_rule(rule, family, call, (), scope, deny=False):
                return Decision("allow", f"allowed by rule {rule}", rule.text)
        return Decision("ask", "permission mode strict asks for every call")
    if call.session == SESSION_CONFINED:
        return Decision("allow", f"exec_command session {sid} runs in the read-only confinement "
                                 "it was started in", confine=True)
    chars = call.args.get("chars")
    keys = chars if isinstance(chars, str) else ""
    if not keys.strip(_INTERRUPT_KEYS):
        return Decision("allow", f"polling or interrupting exec_command session {sid}")
    return _decide_session_input(call, keys, policy)


# Ctrl-C, Ctrl-D, Ctrl-\: signals and end of input, no program reads a command out of them
_INTERRUPT_KEYS = "\x03\x04\x1c"
_MAX_INPUT_AS_COMMAND = 20_000


def _decide_session_input(call: Call, keys: str, policy: Policy) -> Decision:
    """Input to an unconfined session, decided as a new command. Read as a shell command line
    (it is one, to a shell or to `less`/`ed` after `!`), a deny rule or guard it meets denies
    it. It is admitted only where the session's admission covers any command: unrestricted
    mode, a rule admitting every shell command (`Bash`, `Bash(:*)`, `*`), or a person (or a
    PermissionRequest hook) who approved the session, which is what a start that asks now
    means; and then still asks when deny rules exist that the input could be dodging. A session
    a narrow rule admitted (`Bash(git log:*)`) asks for every input."""
    rules = policy.rules
    sid = call.args.get("session_id")
    command, folder = call.session_start or ("", None)
    cwd = folder or call.cwd
    if len(keys) <= _MAX_INPUT_AS_COMMAND:
        from tether.core.permissions.shellcheck import ShellCheck

        # and a line after a shell escape (`!cmd` in less, more, ed, ex, vi) as the command it runs
        escapes = [ln.lstrip()[1:] for ln in keys.splitlines() if ln.lstrip().startswith("!")]
        text = "\n".join([keys, *escapes])
        read = ShellCheck(Call("Bash", {"command": text}, command=text, cwd=cwd), policy).decide()
        if read.verdict == "deny":
            return replace(read, reason=f"The input to exec_command session {sid}, read as a "
                                        f"command: {read.reason}")
    shown = _clip(command)
    broad = policy.mode == "unrestricted" or _every_command_rule(rules) is not None
    if not broad and not command:
        return Decision("ask", f"write_stdin types into exec_command session {sid}, whose "
                               "first command is not known to judge its input by")
    if not broad:
        from tether.core.permissions.shellcheck import ShellCheck

        first = ShellCheck(Call("exec_command", {"cmd": command}, command=command, cwd=cwd),
                           replace(policy, can_confine=False)).decide()
        if first.verdict == "deny":
            return replace(first, reason=f"exec_command session {sid} (`{shown}`) is denied now: "
                                         f"{first.reason}")
        broad = first.verdict == "ask"  # it runs, so someone approved it as it is
        if not broad:
            by = f"rule {first.matched_rule}" if first.matched_rule else "a rule"
            return Decision("ask", f"write_stdin types into exec_command session {sid} "
                                   f"(`{shown}`), which {by} admitted as a command, not what is "
                                   "typed into it: a pager, an editor or an interpreter runs "
                                   "its input as commands. Approve this input, or allow every "
                                   "shell command")
    if any(r.family in ("*", SHELL_FAMILY) or r.kind == "path" for r in rules.denies):
        return Decision("ask", f"write_stdin types into exec_command session {sid} (`{shown}`): "
                               "tether cannot check what the program there does with its input "
                               "against your deny rules")
    return Decision("allow", f"exec_command session {sid} (`{shown}`) was admitted for any "
                             "command; writing to it inherits that")


def _every_command_rule(rules: RuleSet) -> Rule | None:
    """An allow rule admitting every shell command: `*`, `Bash`, `Bash(:*)`."""
    for rule in (*rules.cli_allow, *rules.session_allow, *rules.allow):
        if rule.kind == "any" or (rule.family == SHELL_FAMILY and (
                rule.kind == "family" or (rule.kind == "shell_prefix" and not rule.tokens))):
            return rule
    return None


def _clip(text: str, limit: int = 80) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"

r"""Who may run what: rules, modes and the one `decide()` that applies them.

`checker.decide(call, policy)` is the only place a call is judged. The runner
builds a `Policy` per call from the tool-context snapshot's mode, the session's `RuleSet`
(settings deny/ask/alwaysAsk/allow, CLI allow/deny, session allow rules added by clients) and a
`Scope` (resolved cwd, additional directories, home). Choices beyond the reference:

- Shell calls are analysed per simple command (`shell.analyse`, cached); wrappers (`timeout`,
  `nice`, `env`, `sudo`, `xargs`, `bash -c 'literal'`, `find -exec`) are peeled for deny
  matching; only transparent ones for allow. A command name spelled with quotes or escapes
  (`'rm'`, `\ls`) is denied by `Bash(rm:*)` but allowed by no rule. Assignments other than
  locale/colour variables, `sudo`, `setsid` and risky `git` globals block allow rules.
- File words of shell commands and redirection targets are held to file deny rules
  (`cat .env` under `Read(.env)`), and recursive readers (`grep -r`, `rg`, `find`) lose the
  read-only auto-allow while file deny rules exist, because they could read a denied file.
- A repository git finds from the command's folder (config, includes, worktree config, hooks,
  submodules, partial-clone remotes — as `git` itself reports them) that names a program loses
  the read-only auto-allow for `git`; confined commands run every git with those programs off.
- What only the read-only auto-allow admits runs confined (`Decision.confine`): the Bash tool
  runs it in `services.confinement`, read-only with no network and tether's state hidden, or
  not at all; with no kernel backend the decision asks instead.
- Deny rules match case-folded and NFC-normalised, against the spelled and the resolved path; a
  bare name (`.env`) denies at any depth anywhere, allows only under the working directory.
- In `unrestricted` mode an opaque command (`eval`, `bash -c "$x"`) asks when deny rules exist,
  since it could be dodging them.
- An approval that rewrites the arguments (`updatedInput`) is decided again; a deny still wins.
  A PreToolUse hook's rewrite is decided in full: an ask goes back to the approver.
- `write_stdin` input is a new command (`permissions/sessions.py`): a confined session stays
  confined; otherwise it asks unless the session was admitted for any command (yolo, `Bash`, a
  person), and then still asks while deny rules exist; input reading as a denied command denies.
- ApplyPatch is judged per path and access (`Call.accesses`): a move reads and deletes its
  source and writes its destination, so Read denies bind it (and every Edit-family call: an
  edit reads what it changes and shows it); `.envrc`, `.vscode`, `.idea`
  (`sandbox/armed.py`'s names) ask for every file write in every mode, like `.git`/`.tether`.
- MCP rules match the whole `mcp__<server>` or tool name, case-folded, against the tool's
  configured server (`mcp__git` is not server `git__evil`; a deny of `mcp__evil` covers `Evil`).
- Hook matchers see the tool's canonical family too (`Bash` guards `exec_command`); the hook
  input keeps the real name.
- Workspace files the user's hooks run (`runtime/extensions/hook_scripts.py`) are armed: file writes to
  them ask and the workspace sandbox mounts them read-only.
- Builtin words bash evaluates as code are opaque unless plainly literal (`evaluated.py`):
  `test -v 'a[$(cmd)]'`, `printf -v`, `read`, `mapfile -C`, `let`, `declare -i`/`-n`, `compgen -W`.
- The state guard reads `$TETHER_HOME`/`$PWD` as paths and follows `cd`/`pushd`/`popd`; without
  a sandbox, `--yolo` asks for a redirect, directory or file operand the command computes at
  run time (`state_paths.py`); the run's own environment variables are the user's values.
- A hard link into tether's state is never read or written through (`aliases.py`): file tools
  refuse it by inode, and no sandboxed command runs while a state secret has another name.
- The workspace sandbox's armed set (`sandbox/armed.py`) includes `.agents/skills` (the list
  `runtime/extensions/skills.py` scans) and a git directory made of `HEAD` beside `commondir`.
"""

from tether.core.permissions.checker import Call, Guards, Policy, RuleSet, Scope, decide
from tether.core.permissions.modes import (
    MODE_STRICTNESS,
    PERMISSION_MODES,
    Decision,
    Verdict,
    headless_denial,
    normalize_mode,
)
from tether.core.permissions.rules import Rule, RuleError, parse_rule

__all__ = [
    "MODE_STRICTNESS",
    "PERMISSION_MODES",
    "Call",
    "Decision",
    "Guards",
    "Policy",
    "Rule",
    "RuleError",
    "RuleSet",
    "Scope",
    "Verdict",
    "decide",
    "headless_denial",
    "normalize_mode",
    "parse_rule",
]

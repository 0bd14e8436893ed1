"""Git safe mode: the environment under which no git process in a command runs a program the
repository chose.

Git reads `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n` as command-line config,
which outranks every config file, and passes them on to the gits it starts (submodules, `git -C`
in a script), so one environment covers every git however deeply nested in a command.

What it switches off: the fsmonitor hook, every hook (`core.hooksPath=/dev/null`: `git status`
and `git diff` run `post-index-change`), pagers (`GIT_PAGER=cat` outranks `core.pager` and
`pager.<cmd>`; git treats `cat` as "no pager"), signature programs (`gpg.*program=false`: a
signed commit under `--show-signature`, `%G?` or `log.showSignature` verifies as bad without
running the repository's program), ssh and proxy commands, credential helpers (an empty value
resets the list), askpass and editors, alternate-refs commands, and every transport
(`GIT_ALLOW_PROTOCOL=none` outranks any `protocol.*.allow`, so no `ext::` remote runs).

What an environment cannot switch off, because only a command-line flag does (`--no-ext-diff`,
`--no-textconv`) or because the program hangs off a name the repository picks: `diff.external`
(an empty value makes every `git diff` fail), `diff.<driver>.command` / `.textconv` and
`filter.<driver>.clean` / `.smudge` / `.process`, chosen through `.gitattributes`. A repository
that names any of them loses the read-only auto-allow (`core.permissions.gitconfig.git_hazard`),
so an auto-allowed command never meets one; confinement keeps it from planting one mid-command.
"""

from __future__ import annotations

from collections.abc import Mapping

# (key, value) pairs appended after any the caller already passes, so these win.
SAFE_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.sshCommand", "false"),
    ("core.gitProxy", "false"),
    ("core.askPass", ""),
    ("core.editor", "false"),
    ("core.alternateRefsCommand", "true"),
    ("sequence.editor", "false"),
    ("gpg.program", "false"),
    ("gpg.openpgp.program", "false"),
    ("gpg.x509.program", "false"),
    ("gpg.ssh.program", "false"),
    ("gpg.ssh.defaultKeyCommand", "false"),
    ("log.showSignature", "false"),
    ("credential.helper", ""),
    ("protocol.allow", "never"),
    ("submodule.recurse", "false"),
    ("interactive.diffFilter", "cat"),
)

# Set outright: each outranks the config key of the same job.
SAFE_VARIABLES: dict[str, str] = {
    "GIT_PAGER": "cat",
    "GIT_EDITOR": "false",
    "GIT_SEQUENCE_EDITOR": "false",
    "GIT_ASKPASS": "",  # empty: no askpass program, and GIT_TERMINAL_PROMPT=0 no prompt
    "SSH_ASKPASS": "",
    "GIT_SSH_COMMAND": "false",
    "GIT_ALLOW_PROTOCOL": "none",
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
}

# Removed: each names a program git would run in place of its own behaviour.
UNSET_VARIABLES = ("GIT_EXTERNAL_DIFF", "GIT_SSH", "GIT_PROXY_COMMAND")


def git_safe_env(base_env: Mapping[str, str]) -> dict[str, str]:
    """`base_env` plus the variables that make every git process inside a command run no
    repository-chosen program (see the module docstring for what remains)."""
    env = {k: v for k, v in base_env.items() if k not in UNSET_VARIABLES}
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0") or 0)
    except ValueError:
        count = 0  # git would refuse a bad count: start over rather than pass it on
    if count < 0:
        count = 0
    for key, value in SAFE_CONFIG:
        env[f"GIT_CONFIG_KEY_{count}"] = key
        env[f"GIT_CONFIG_VALUE_{count}"] = value
        count += 1
    env["GIT_CONFIG_COUNT"] = str(count)
    env.update(SAFE_VARIABLES)
    return env

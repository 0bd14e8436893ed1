"""The grammars of programs that launch another program (`timeout`, `nice`, `stdbuf`, `ionice`,
`taskset`, `chrt`, `flock`, `setpriv`, `script`, `unshare`, `sudo`, `doas`, `setsid`, `time`,
`exec`, `builtin`, `command`), read from their real option syntax.

Each step takes a wrapper's argv and returns what it runs, why no allow rule may admit that
(`sudo`, `setsid`, a lock file it creates), and the directory it moves to; or `None` when this
call of it runs no command (`ionice -p 12`). An option the grammar does not know makes the
launch opaque: tether cannot tell whether the next word is its value or the command.
Launchers whose grammar is not modelled at all are in `RUNNERS`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tether.core.permissions.options import Grammar

Argv = tuple[str | None, ...]  # None: a word whose value is only known at run time
# (what it runs, a note — "opaque:…" when it cannot be read — and the directory it moves to)
Step = tuple[Any, str | None, str | None]


@dataclass(frozen=True)
class _Wrapper:
    """Options stop at the first operand (their getopt strings start with `+`); `skip` operands
    come before the command (`timeout DURATION`); `no_command` options mean it runs none."""

    name: str
    grammar: Grammar
    skip: int = 0
    no_command: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()  # options whose value is a file it writes
    note: str | None = None  # why no allow rule may admit what it runs
    moves: frozenset[str] = frozenset()  # options whose value is the directory it runs in
    opaque: frozenset[str] = frozenset()  # options that make what runs unknowable


def options(w: _Wrapper, argv: Argv) -> tuple[int, list[tuple[str, str | None]]] | str:
    """(index of the first operand, [(option, value)]) or why the options cannot be read."""
    seen: list[tuple[str, str | None]] = []
    g = w.grammar
    i = 1
    while i < len(argv):
        word = argv[i]
        if word is None:
            return f"`{w.name}` is given words that are not static"
        if word == "--":
            return i + 1, seen
        if not word.startswith("-") or word == "-":
            return i, seen
        i += 1
        if w.name == "nice" and re.match(r"^-[-+]?\d+$", word):
            seen.append(("-n", word))  # the legacy `nice -5`, `nice --5`
            continue
        if word.startswith("--"):
            name, eq, given = word.partition("=")
            value: str | None = given
            matches = [n for n in g.long_value if n.startswith(name)]
            canonical = name if name in g.long_value else (matches[0] if len(matches) == 1 else None)
            if canonical is None:
                return f"`{w.name} {word}` is an option tether does not know"
            kind = g.long_value[canonical]
            if kind in ("value", "file") and not eq:
                if i >= len(argv) or argv[i] is None:
                    return f"`{w.name} {word}` is given a value that is not static"
                value = argv[i] or ""
                i += 1
            seen.append((canonical, value if (eq or kind in ("value", "file")) else None))
            continue
        for k in range(1, len(word)):
            letter = "-" + word[k]
            short_kind = g.short_value.get(letter)
            if short_kind is None:
                return f"`{w.name} {word}` is an option tether does not know"
            if short_kind == "optional":
                seen.append((letter, word[k + 1 :] or None))
                break
            if short_kind in ("value", "file"):
                value = word[k + 1 :]
                if not value:
                    if i >= len(argv) or argv[i] is None:
                        return f"`{w.name} {word}` is given a value that is not static"
                    value = argv[i] or ""
                    i += 1
                seen.append((letter, value))
                break
            seen.append((letter, None))
    return i, seen


def _wrapped(w: _Wrapper) -> Any:
    def step(argv: Argv) -> Step | None:
        parsed = options(w, argv)
        if isinstance(parsed, str):
            return (), "opaque:" + parsed, None
        i, seen = parsed
        names = {name for name, _ in seen}
        if names & w.no_command:
            return None  # `ionice -p 12` runs nothing: it is judged as itself
        hidden = names & w.opaque
        if hidden:
            return (), f"opaque:`{w.name} {sorted(hidden)[0]}` makes what runs unknowable", None
        note = w.note
        written = [value for name, value in seen if name in w.writes]
        if written:
            note = note or f"writes {written[0] or 'a file'} ({w.name})"
        moves_to = next((value for name, value in seen if name in w.moves), None)
        i += w.skip
        if i >= len(argv):
            return None
        return argv[i:], note, moves_to

    return step


def _set(*names: str) -> frozenset[str]:
    return frozenset(names)


_G = Grammar
_SPECS = [
    _Wrapper("timeout", _G("s:k:v", "signal= kill-after= preserve-status foreground verbose"),
             skip=1),
    _Wrapper("nice", _G("n:", "adjustment=")),
    _Wrapper("nohup", _G()),
    # bash's `time` keyword takes `-p`; GNU time also `-o FILE`, which it writes
    _Wrapper("time", _G("ao:f:pqv", "append output= format= portability quiet verbose"),
             writes=_set("-o", "--output")),
    _Wrapper("builtin", _G()),
    _Wrapper("exec", _G("a:cl")),
    _Wrapper("stdbuf", _G("i:o:e:", "input= output= error=")),
    _Wrapper("ionice", _G("c:n:pPut", "class= classdata= pid pgid uid ignore"),
             no_command=_set("-p", "-P", "-u", "--pid", "--pgid", "--uid")),
    _Wrapper("taskset", _G("apc", "all-tasks pid cpu-list"), skip=1,
             no_command=_set("-p", "--pid")),
    _Wrapper("chrt", _G("abdefimoprRvT:P:D:", "all-tasks batch deadline fifo idle other rr ext "
                                             "max pid reset-on-fork verbose sched-runtime= "
                                             "sched-period= sched-deadline="),
             skip=1, no_command=_set("-p", "--pid", "-m", "--max")),
    _Wrapper("setsid", _G("cfw", "ctty fork wait"),
             note="runs outside the session's process group (setsid)"),
    _Wrapper("setpriv", _G("d", "dump nnp no-new-privs clear-groups keep-groups init-groups "
                                "reset-env reuid= euid= ruid= regid= egid= rgid= groups= "
                                "inh-caps= ambient-caps= bounding-set= securebits= pdeathsig= "
                                "selinux-label= apparmor-profile= landlock-access= "
                                "landlock-rule= seccomp-filter="),
             note="runs with changed privileges (setpriv)"),
    _Wrapper("unshare", _G("fmuinpCTUrR:w:S:G:cl",
                           "mount[=] uts[=] ipc[=] net[=] pid[=] user[=] cgroup[=] time[=] fork "
                           "kill-child[=] mount-proc[=] mount-binfmt[=] map-root-user "
                           "map-current-user map-user= map-group= map-users= map-groups= "
                           "map-auto owner= propagation= setgroups= keep-caps setuid= setgid= "
                           "root= wd= monotonic= boottime= load-interp="),
             note="runs in new namespaces (unshare)", moves=_set("-w", "--wd"),
             opaque=_set("-R", "--root")),
    _Wrapper("sudo", _G("AbEHiKklnPSsVvC:D:g:h:p:R:r:t:T:U:u:e",
                        "askpass background preserve-env[=] group= set-home host= login "
                        "remove-timestamp reset-timestamp list non-interactive preserve-groups "
                        "prompt= chroot= role= stdin shell type= command-timeout= other-user= "
                        "user= validate chdir= close-from= edit"),
             note="runs as another user through `sudo`", moves=_set("-D", "--chdir"),
             opaque=_set("-e", "--edit", "-R", "--chroot")),
    _Wrapper("doas", _G("a:C:Lnsu:"), note="runs as another user through `doas`",
             opaque=_set("-C")),
]
STEPS: dict[str, Any] = {w.name: _wrapped(w) for w in _SPECS}

# Launchers whose grammar tether does not model: every later word may be the command they run,
# so deny rules are matched at every position (a match asks), and an allow rule for the inner
# command does not admit them.
RUNNERS = frozenset(
    {"strace", "ltrace", "watch", "runuser", "su", "chroot", "nsenter", "firejail", "bwrap",
     "systemd-run", "parallel", "entr", "valgrind", "gdb", "perf", "pkexec", "sg", "prlimit",
     "numactl", "cgexec", "proot", "faketime", "fakeroot", "torsocks", "proxychains",
     "proxychains4", "nocache", "chronic", "unbuffer", "eatmydata", "dbus-run-session",
     "xvfb-run", "catchsegv", "caffeinate", "toybox", "dotenv", "with-contenv", "s6-setuidgid", "chpst", "setuidgid", "envdir", "ssh-agent",
     "flatpak-spawn", "daemonize", "start-stop-daemon", "tsp", "sem", "retry", "rlwrap"}
)


def _command(argv: Argv) -> Step | None:
    if any(w in ("-v", "-V") for w in argv[1:2]):
        return None  # `command -v x` looks a name up; it runs nothing
    return _wrapped(_Wrapper("command", _G("pvV")))(argv)


def _flock(argv: Argv) -> Step | None:
    spec = _Wrapper("flock", _G("sxenouFw:E:", "shared exclusive unlock nonblock nb close "
                                              "no-fork timeout= wait= conflict-exit-code= verbose"))
    parsed = options(spec, argv)
    if isinstance(parsed, str):
        return (), "opaque:" + parsed, None
    i, _ = parsed
    if i + 1 >= len(argv):
        return None  # `flock 9`: a descriptor, no command
    note = f"creates the lock file {argv[i]} (flock)"
    if argv[i + 1] in ("-c", "--command"):
        if i + 2 >= len(argv) or argv[i + 2] is None:
            return (), "opaque:`flock -c` is given a script that is not static", None
        return ("sh", "-c", argv[i + 2]), note, None
    return argv[i + 1 :], note, None


def _script(argv: Argv) -> Step | None:
    """`script -c CMD [file]` runs CMD in a shell and records it in `file` (./typescript)."""
    spec = _Wrapper("script", _G("aeE:fB:I:O:T:t?m:o:q",
                                 "append return echo= flush force log-io= log-in= log-out= "
                                 "log-timing= timing[=] logging-format= output-limit= quiet"))
    rest: list[str | None] = [argv[0]]
    command: str | None = None
    found = False
    i = 1
    valued = set("EBIOTmo")
    while i < len(argv):
        word = argv[i]
        if word is not None and word.startswith("--command"):
            if "=" in word:
                command, found = word.split("=", 1)[1], True
            elif i + 1 < len(argv):
                command, found = argv[i + 1], True
                i += 1
            i += 1
            continue
        if word is not None and re.match(r"^-[^-]", word):
            # a cluster: `-qc CMD`, `-qcCMD`; a letter that takes a value ends it
            for k in range(1, len(word)):
                if word[k] in valued:
                    break
                if word[k] == "c":
                    found = True
                    if word[k + 1 :]:
                        command = word[k + 1 :]
                    elif i + 1 < len(argv):
                        command = argv[i + 1]
                        i += 1
                    word = word[:k]
                    break
            if word != "-":
                rest.append(word)
            i += 1
            continue
        rest.append(word)
        i += 1
    if not found:
        return (), "opaque:`script` without `-c` runs an interactive shell", None
    parsed = options(spec, tuple(rest))
    if isinstance(parsed, str):
        return (), "opaque:" + parsed, None
    if command is None:
        return (), "opaque:`script -c` is given a command that is not static", None
    return ("sh", "-c", command), "records a typescript file (script)", None


STEPS.update({"command": _command, "flock": _flock, "script": _script})

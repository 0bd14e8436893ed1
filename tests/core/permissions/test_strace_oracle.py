"""Ground truth for group (a): every command the checker allows is run by real bash under strace.

The catalogue's oracle (`shared/reference/security-cases.md` §2): a case fails when bash executes
a program the checker did not evaluate. For each allowed command — the (a) seeds, the benign forms
and a seeded mutation of them — bash runs it in a throwaway workspace, HOME in a tmp dir, with
stub executables (`exit 0`) first on PATH for the dangerous names. Every successful `execve`
after the outer bash must name a program whose basename is the `argv[0]` of some `SimpleCommand`
in `shell.analyse(...)` (any role, any form): anything else ran unseen while the checker said
allow, which is a fail-open.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.core.permissions.support import policy, shell
from tests.core.permissions.test_security_cases import A_BENIGN, A_BYPASSES, A_RULES
from tests.requirements import missing
from tether.core.permissions import shell as shell_analysis

STRACE = "/usr/bin/strace"
SEED = 20260426
MUTATIONS = 900
STUBBED = (
    "rm",
    "curl",
    "touch",
    "python3",
    "tee",
    "wget",
    "nc",
    "sudo",
    "doas",
    "mv",
    "cp",
    "chmod",
)
# Programs that are shell scripts exec'ing another program as their implementation (Debian's
# `egrep` is `exec grep -E "$@"`): that inner exec was decided when the outer name was.
IMPLEMENTED_BY = {"egrep": {"grep"}, "fgrep": {"grep"}}

# a28 (quote desync) is in the catalogue but not in A_BYPASSES; bash is its only judge.
EXTRA_SEEDS = ['echo "\\"; touch p; echo \\""', 'ls "a\\" ; touch p"', "echo 'a\\' ; touch p"]
# Code hidden in data (issue 14): bash runs these `touch`es while the words look like data.
CODE_IN_DATA_SEEDS = [
    "[[ 'a[$(touch p)]' -eq 0 ]]",
    "test -v 'a[$(touch p)]'",
    "for x in 'a[$(touch p)]'; do ls $((x)); done",
    "for x in 'a[$(touch p)]'; do ls ${!x}; done",
    "for x in '$(touch p)'; do echo ${x@P}; done",
    "for x in 'a[$(touch p)]'; do [[ $x -eq 1 ]]; done",
    "for x in '-v a[$(touch p)]'; do [ $x ]; done",
]
# More of the read-only vocabulary, so mutations of benign commands reach the allow path often.
EXTRA_BENIGN = [
    "cat README.md",
    "head -n 3 src/app.py",
    "wc -l src/app.py",
    "echo done",
    "printf '%s\\n' a b",
    "grep -c TODO src/app.py",
    "sort list",
    "git log --oneline",
    "pwd",
    "ls src",
    "egrep TODO src/app.py",
    "printf x | xargs",
    'basename "$PWD"',
    'for f in *.py; do wc -l "$f"; done',
    "echo $(git rev-parse HEAD)",
    '[ -n "$x" ]',
    "[[ $? -eq 0 ]]",
    'for f in src/*; do echo "${f%.py}"; done',
    "cat {README.md,list}",
    "wc -l src/*.py",
    "sed -n '1,3p' src/app.py",
    "awk '{print $1}' list",
    "command -v ls",
]
# Where bash's grammar and tree-sitter-bash's may part: quoting, heredocs, expansions,
# comments, redirections, wrappers. Run as they are (not mutated); each is judged by bash.
PARSER_EDGES = [
    "ls $'\\'' ; touch p",
    "echo $'a\\'b' ; touch p",
    'ls "a\\\\" ; touch p',
    "ls <<EOF; touch p\nx\nEOF",
    "ls <<EOF && touch p\nx\nEOF",
    "ls <<EOF | touch p\nx\nEOF",
    "ls <<'EOF'\n$(touch p)\nEOF",
    'ls <<E"OF"\n$(touch p)\nEOF',
    "ls <<EOF\nEOF\ntouch p",
    "ls <<EOF\nx\nEOF touch p\nEOF",
    "ls <<EOF\n EOF\ntouch p\nEOF",
    "ls a#$(touch p)",
    "ls ${x:-$(touch p)}",
    "ls $((1+$(touch p)))",
    "ls $[1+$(touch p)]",
    "ls <<< $(touch p)",
    "ls > >(touch p)",
    "[[ -n $(touch p) ]] && ls",
    "for i in $(touch p); do ls; done",
    "case x in $(touch p)) ls;; esac",
    "ls \\\n; touch p",
    "ls # $(touch p)",
    "ls; # x\ntouch p",
    "ls {a,b}$(touch p)",
    "ls ~$(touch p)",
    'ls $"$(touch p)"',
    "ls | while read l; do touch p; done",
    "ls 'a'\\''b' ; touch p",
    "git status \\#; touch p",
    "ls & disown; touch p",
    "time ls; touch p",
    "time ls",
    "ls; exit; touch p",
    "ls |& touch p",
    "ls &>/dev/null; touch p",
    "ls >| /dev/null",
    "ls <> /dev/null",
    "ls $(: $(touch p))",
    'ls "${x/$(touch p)/}"',
    "ls ${x:=$(touch p)}",
    "ls ${!x}",
    "echo $((a[$(touch p)]))",
    "ls ${x[$(touch p)]}",
    "ls $x[$(touch p)]",
    "ls -l --sort=$(touch p)",
    "ls -- $(touch p)",
    "ls <(ls) >(ls)",
    "echo $( case x in x) touch p;; esac )",
    "echo $(echo ')' ; touch p)",
    'echo "$(echo "$(touch p)")"',
    "echo ${x:-`touch p`}",
    'echo "${x:-"$(touch p)"}"',
    "echo ${x:-'$(touch p)'}",
    "echo \"${x:-'$(touch p)'}\"",
    "echo ${x:+$(touch p)}",
    "echo $(( `touch p` ))",
    'echo "$(cat <<EOF\n$(touch p)\nEOF\n)"',
    "echo $(cat <<'EOF'\n)\nEOF\n); touch p",
    "printf '%s' \"$(printf ')'; touch p)\"",
    "ls ${IFS}",
    "echo a\\\nb; touch p",
    "echo $'\\x24(touch p)'",
    "echo \\$(touch p)",
    'echo "\\$(touch p)"',
    "echo '$(touch p)'",
    "echo $(echo #)\ntouch p",
    "echo `#` touch p",
    "echo `echo \\\\` ; touch p`",
    "ls `# comment\ntouch p`",
    "echo {a,b}; touch p",
    "echo $(ls)",
    "cat list | xargs -i ls {}",
    "ls | xargs -I{} ls {}",
    "ls | xargs -r ls",
    "timeout -s9 5 ls",
    "timeout --foreground 5 ls",
    "timeout 5s ls",
    "timeout -k1 5 ls",
    "env -- ls",
    "env LC_ALL=C ls",
    "command ls",
    "exec ls",
    "nice -n5 ls",
    "LC_ALL=$(touch p) ls",
    "TERM=`touch p` ls",
    "ls $(</dev/null)",
    "ls $(< list)",
    "echo x >&2; ls",
    "ls 2>&-",
    "ls 3>/dev/null",
    "ls {fd}>/dev/null",
    "echo ${x@P}",
    "x='$(touch p)'; echo ${x@P}",
    "git status --short -- $(touch p)",
    "git --no-pager status",
    "git -C src status; touch p",
    "find . -name '*.py' -newer $(touch p)",
    "find . -name x -print0 | xargs -0 ls",
    "echo ok &",
    "ls & & touch p",
    "{ ls; } > /dev/null",
    "(ls) 2>/dev/null",
    "if ls; then echo ok; fi",
    "while false; do touch p; done",
    "[ -e x ] && ls",
    'test -n "$(touch p)"',
    'echo "${HOME}"',
    'ls "$HOME"',
    "ls ~",
    "ls ~root",
    'ls $(echo ")")$(touch p)',
    'ls "$(echo "\\")")"; touch p',
    'echo "$(echo \'"\')" ; touch p',
    "echo $(echo '$(') ; touch p",
    "ls ${x:-\\}} ; touch p",
    "ls ${x:-'}'} ; touch p",
    'ls "${x:-}}" ; touch p',
    "echo $'\\'' \"'\" ; touch p",
    "echo \"'\" '\"' ; touch p",
    "ls -la\\\n;touch p",
    "git status\t;\ttouch p",
]

# Found by this oracle: bash runs `rm` unseen while the checker allows (or, in unrestricted
# mode, fails to deny). (id, command, mode, why)
KNOWN_FAIL_OPENS = [
    (
        "redirect-then-subst",
        "ls 2>/dev/null $(rm x)",
        "standard",
        "words after a redirection are extra `destination`s of file_redirect; only the first is read",
    ),
    (
        "redirect-then-subst-git",
        "git status 2>/dev/null $(rm x)",
        "standard",
        "words after a redirection are extra `destination`s of file_redirect; only the first is read",
    ),
    (
        "redirect-then-procsub",
        "ls >/dev/null <(rm x)",
        "standard",
        "words after a redirection are extra `destination`s of file_redirect; only the first is read",
    ),
    (
        "read-redirect-then-backticks",
        "ls <README.md `rm x`",
        "standard",
        "words after a redirection are extra `destination`s of file_redirect; only the first is read",
    ),
    (
        "redirect-inside-wrapper",
        "timeout 5 >/dev/null rm -rf x",
        "unrestricted",
        "the wrapped command after a redirection is never peeled, so `Bash(rm:*)` never sees it",
    ),
    (
        "pattern-expansion",
        "ls ${HOME#$(rm x)}",
        "standard",
        "`${VAR#…}` / `${VAR%…}` patterns parse as an opaque (regex) node; `$(…)` inside is unseen",
    ),
    (
        "pattern-expansion-quoted",
        'ls "${HOME%$(rm x)}"',
        "standard",
        "`${VAR#…}` / `${VAR%…}` patterns parse as an opaque (regex) node; `$(…)` inside is unseen",
    ),
    (
        "nested-backticks",
        "ls `echo \\`rm x\\``",
        "standard",
        "escaped backticks inside backticks are a nested substitution to bash, a word to tree-sitter",
    ),
    (
        "heredoc-tab-subst",
        "cat <<-EOF\n\t$(rm x)\n\tEOF",
        "standard",
        "an unquoted heredoc line starting with a tab yields no command_substitution node",
    ),
    (
        "heredoc-backticks",
        "cat <<EOF\n`rm x`\nEOF",
        "standard",
        "backticks in an unquoted heredoc body yield no command_substitution node",
    ),
]
SEPARATORS = [";", " ; ", "&&", " && ", "||", " || ", "|", " | ", "&", " & ", "\n", " |& "]


def _single_quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _wrap(rng: random.Random, command: str) -> str:
    choice = rng.randrange(9)
    if choice == 0:
        return f"( {command} )"
    if choice == 1:
        return f"$( {command} )"
    if choice == 2:
        return f"ls $( {command} )"
    if choice == 3:
        return f"bash -c {_single_quoted(command)}"
    if choice == 4:
        return f"timeout 5 {command}"
    if choice == 5:
        return f"env {command}"
    if choice == 6:
        return f"{{ {command}; }}"
    if choice == 7:
        return f'echo "$({command})"'
    return command


def _respell(rng: random.Random, command: str) -> str:
    """Whitespace and quoting that bash reads the same way (or, for bash, tellingly not)."""
    choice = rng.randrange(7)
    if choice == 0:
        return command.replace(" ", "  ")
    if choice == 1:
        return command.replace(" ", "\t", 1)
    if choice == 2:
        return f"  {command} "
    if choice == 3:  # quote the command name
        head, _, rest = command.partition(" ")
        return f"'{head}' {rest}".rstrip() if head.isalnum() else command
    if choice == 4:
        head, _, rest = command.partition(" ")
        return f'"{head}" {rest}'.rstrip() if head.isalnum() else command
    if choice == 5:  # backslash inside the command name
        head, _, rest = command.partition(" ")
        if len(head) > 1 and head.isalnum():
            return f"{head[0]}\\{head[1:]} {rest}".rstrip()
        return command
    return command


def mutations(seed: int = SEED, count: int = MUTATIONS) -> list[str]:
    rng = random.Random(seed)
    bypasses = [c for _, c, _ in A_BYPASSES] + EXTRA_SEEDS + CODE_IN_DATA_SEEDS
    benign = list(A_BENIGN) + EXTRA_BENIGN
    out: list[str] = []
    while len(out) < count:
        parts = []
        for _ in range(rng.choice((2, 2, 3))):
            pool = benign if rng.random() < 0.8 else bypasses
            parts.append(_respell(rng, rng.choice(pool)))
        joined = parts[0]
        for part in parts[1:]:
            joined += rng.choice(SEPARATORS) + part
        if rng.random() < 0.5:
            joined = _wrap(rng, joined)
        if rng.random() < 0.2:
            joined = _wrap(rng, joined)
        out.append(joined)
    return list(dict.fromkeys(out))


def corpus() -> list[str]:
    seeds = [c for _, c, _ in A_BYPASSES] + list(A_BENIGN) + EXTRA_SEEDS + EXTRA_BENIGN
    seeds += PARSER_EDGES + CODE_IN_DATA_SEEDS
    return list(dict.fromkeys(seeds + mutations()))


# -- running bash ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    command: str
    executed: tuple[str, ...]  # basenames of successful execve calls, the outer bash left out
    timed_out: bool


_EXECVE = re.compile(r'^(\d+)\s+execve\("((?:[^"\\]|\\.)*)",')
_RESUMED = re.compile(r"^(\d+)\s+<\.\.\. execve resumed>.*= 0$")


def parse_execs(trace: str) -> list[str]:
    """Program paths of the successful execve calls, in order, across strace's split lines."""
    pending: dict[str, str] = {}
    out: list[str] = []
    for line in trace.splitlines():
        line = line.rstrip()
        start = _EXECVE.match(line)
        if start:
            pid, path = start.groups()
            if line.endswith("<unfinished ...>"):
                pending[pid] = path
            elif line.endswith("= 0"):
                out.append(path)
            continue
        resumed = _RESUMED.match(line)
        if resumed and resumed.group(1) in pending:
            out.append(pending.pop(resumed.group(1)))
    return out


def run_traced(command: str, cwd: Path, home: Path, stubs: Path, trace: Path) -> Run:
    env = {
        "PATH": f"{stubs}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C",
        "TERM": "dumb",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    argv = [
        "timeout",
        "5",
        STRACE,
        "-f",
        "-qq",
        "-s",
        "256",
        "-e",
        "trace=execve",
        "-o",
        str(trace),
        "bash",
        "-c",
        command,
    ]
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    timed_out = False
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        # `&` leaves background jobs; kill the whole group so nothing outlives the test.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    timed_out = timed_out or proc.returncode == 124
    paths = parse_execs(trace.read_text(errors="replace")) if trace.exists() else []
    assert paths and os.path.basename(paths[0]) == "bash", (
        f"strace saw no outer bash for {command!r}"
    )
    return Run(command, tuple(os.path.basename(p) for p in paths[1:]), timed_out)


def evaluated_names(command: str, cwd: Path, home: Path) -> set[str]:
    analysis = shell_analysis.analyse(command, cwd, home)
    names = set()
    for simple in analysis.commands:
        for form in (simple.argv, *simple.forms):
            if form and form[0]:
                names.add(os.path.basename(form[0]))
    for name in list(names):
        names |= IMPLEMENTED_BY.get(name, set())
    return names


# -- fixtures --------------------------------------------------------------------------------


def _require_strace() -> None:
    why = None
    if not os.access(STRACE, os.X_OK):
        why = f"strace is not installed at {STRACE}"
    else:
        probe = subprocess.run(
            [STRACE, "-qq", "-e", "trace=execve", "true"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if probe.returncode != 0:
            why = f"strace cannot trace here: {probe.stderr.strip()[:200]}"
    if why is None:
        return
    missing("strace, for the execve oracle", f"{why} (apt-get install strace)")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One workspace (a git repository with two commits) and an empty HOME, copied per run."""
    base = tmp_path_factory.mktemp("oracle-template")
    proj, home = base / "proj", base / "home"
    (proj / "src").mkdir(parents=True)
    home.mkdir()
    (proj / "README.md").write_text("hello\n")
    (proj / "src" / "app.py").write_text("# TODO: x\nprint(1)\n")
    for name in ("list", "f", "x", "a"):
        (proj / name).write_text("a\nb\n")
    if shutil.which("git"):
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}
        ident = ["-c", "user.name=oracle", "-c", "user.email=oracle@example.invalid"]
        for step in (
            ["init", "-q", "--template="],
            ["add", "-A"],
            [*ident, "commit", "-qm", "one"],
            [*ident, "commit", "-q", "--allow-empty", "-m", "two"],
            ["repack", "-adq"],
            ["prune-packed"],
            ["pack-refs", "--all"],
        ):
            subprocess.run(["git", *step], cwd=proj, env=env, check=True, capture_output=True)
        shutil.rmtree(proj / ".git" / "logs")  # few files: every run copies the template
    return base


@pytest.fixture(scope="module")
def stubs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("stubs")
    for name in STUBBED:
        path = directory / name
        path.write_text("#!/bin/sh\nexit 0\n")
        path.chmod(0o755)
    return directory


# -- tests -----------------------------------------------------------------------------------


def test_mutations_are_seeded_and_plentiful() -> None:
    first = mutations()
    assert first == mutations()
    assert len(first) >= 300


def test_parse_execs_pairs_unfinished_calls() -> None:
    trace = (
        '100 execve("/usr/bin/bash", ["bash", "-c", "x"], 0x1 /* 3 vars */) = 0\n'
        '101 execve("/usr/bin/ls", ["ls"], 0x2 /* 3 vars */ <unfinished ...>\n'
        '102 execve("/nope/rm", ["rm"], 0x2 /* 3 vars */) = -1 ENOENT (No such file or directory)\n'
        "101 <... execve resumed>) = 0\n"
    )
    assert parse_execs(trace) == ["/usr/bin/bash", "/usr/bin/ls"]


def test_the_oracle_sees_every_program_bash_runs(
    template: Path, stubs: Path, tmp_path: Path
) -> None:
    """A negative control: the trace catches pipes, `&`, wrappers and nested shells, and the
    stubs keep dangerous names harmless."""
    _require_strace()
    base = tmp_path / "control"
    shutil.copytree(template, base, symlinks=True)
    command = "ls | head -1; timeout 5 touch p & bash -c 'rm x; ls'"
    run = run_traced(command, base / "proj", base / "home", stubs, base / "trace")
    assert {"ls", "head", "timeout", "touch", "bash", "rm"} <= set(run.executed), run.executed
    assert (base / "proj" / "x").exists() and not (base / "proj" / "p").exists()
    assert "touch" not in evaluated_names("ls | head -1", base / "proj", base / "home")


def test_bash_runs_nothing_the_checker_did_not_evaluate(
    template: Path, stubs: Path, tmp_path: Path
) -> None:
    _require_strace()
    commands = corpus()
    # Decide everything in the template; copy a fresh workspace only for what it allows, and
    # decide again there, so each run is of a command the checker allowed in that very place.
    first = policy(template / "proj", template / "home", A_RULES)
    candidates = [(i, c) for i, c in enumerate(commands) if shell(first, c).verdict == "allow"]
    workers = max(2, os.cpu_count() or 2)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(
            pool.map(
                lambda item: shutil.copytree(template, tmp_path / f"w{item[0]}", symlinks=True),
                candidates,
            )
        )
    plans: list[tuple[str, Path, set[str]]] = []
    for index, command in candidates:
        base = tmp_path / f"w{index}"
        here = policy(base / "proj", base / "home", A_RULES)
        if shell(here, command).verdict != "allow":
            continue
        # Analysis stays on this thread (the tree-sitter parser is shared); threads only run bash.
        plans.append((command, base, evaluated_names(command, here.scope.cwd, here.scope.home)))

    def trace(plan: tuple[str, Path, set[str]]) -> tuple[Run, set[str]]:
        command, base, names = plan
        return run_traced(command, base / "proj", base / "home", stubs, base / "trace"), names

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(trace, plans))

    disagreements = [
        (r.command, sorted(set(r.executed) - names), sorted(names))
        for r, names in results
        if set(r.executed) - names
    ]
    timeouts = [r.command for r, _ in results if r.timed_out]
    executed = sum(len(r.executed) for r, _ in results)
    print(
        f"\nstrace oracle (seed {SEED}): {len(commands)} commands tried, {len(plans)} allowed "
        f"and run under strace ({executed} execve), {len(disagreements)} disagreements, "
        f"{len(timeouts)} timeouts"
    )
    assert len(plans) >= 100, "too few allowed commands for the oracle to mean anything"
    assert not disagreements, "bash ran programs the checker never evaluated:\n" + "\n".join(
        f"  {cmd!r}: ran {ran}, checker saw {saw}" for cmd, ran, saw in disagreements
    )


@pytest.mark.parametrize(
    ("case", "command", "mode", "why"), KNOWN_FAIL_OPENS, ids=[k[0] for k in KNOWN_FAIL_OPENS]
)
def test_known_fail_open_really_runs_rm(
    template: Path, stubs: Path, tmp_path: Path, case: str, command: str, mode: str, why: str
) -> None:
    """Ground truth for the xfail below: bash does execute `rm` (a stub) for each of them."""
    _require_strace()
    base = tmp_path / "w"
    shutil.copytree(template, base, symlinks=True)
    run = run_traced(command, base / "proj", base / "home", stubs, base / "trace")
    assert "rm" in run.executed, f"{case}: bash ran {run.executed}"


# What each former fail-open must come out as now: deny where the analysis sees the `rm`, and at
# least ask where bash's second expansion pass hides it from the grammar (opaque ⇒ ask).
FIXED_AS = {
    "redirect-then-subst": "deny",
    "redirect-then-subst-git": "deny",
    "redirect-then-procsub": "deny",
    "read-redirect-then-backticks": "deny",
    "redirect-inside-wrapper": "deny",
    "pattern-expansion": "ask",
    "pattern-expansion-quoted": "ask",
    "nested-backticks": "ask",
    "heredoc-tab-subst": "ask",
    "heredoc-backticks": "ask",
}


@pytest.mark.parametrize(
    ("case", "command", "mode", "why"), KNOWN_FAIL_OPENS, ids=[k[0] for k in KNOWN_FAIL_OPENS]
)
def test_former_fail_open_is_no_longer_admitted(
    template: Path, case: str, command: str, mode: str, why: str
) -> None:
    decision = shell(policy(template / "proj", template / "home", A_RULES, mode=mode), command)
    assert decision.verdict == FIXED_AS[case], f"{case} ({why}): {command!r} -> {decision}"


def test_allow_rule_for_git_does_not_run_the_repositorys_fsmonitor(
    template: Path, stubs: Path, tmp_path: Path
) -> None:
    base = tmp_path / "hostile"
    shutil.copytree(template, base, symlinks=True)
    config = base / "proj" / ".git" / "config"
    config.write_text(config.read_text() + "[core]\n\tfsmonitor = touch pwned\n")
    pol = policy(base / "proj", base / "home", A_RULES)
    decision = shell(pol, "git status")
    # Ground truth: in this repository git really runs the configured program.
    _require_strace()
    run = run_traced("git status", base / "proj", base / "home", stubs, base / "trace")
    unseen = set(run.executed) - evaluated_names("git status", pol.scope.cwd, pol.scope.home)
    assert unseen, f"git ran only {sorted(run.executed)}: the hostile config had no effect"
    # So no rule may admit it: `Bash(git status:*)` did not mean "and run core.fsmonitor".
    assert decision.verdict == "ask" and "fsmonitor" in decision.reason

"""File deny rules hold through the shell: globs are matched against what they expand to on disk,
braces are expanded, glued and option-named files count, content printers ask; and wrappers are
read with their real grammars, so `Bash(rm:*)` holds behind every launcher."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.permissions.support import policy, rules, shell

READ_ENV = [
    "cat .e*", "cat .[e]nv", "cat .en?", "cat {.env,x}", "cat .{env,x}", "cat .{e,f}nv",
    "grep -h . .e*", "grep -h . .[d-f]nv", "date -f.env", "date -f .env", "date --file=.env",
    "git show HEAD:.env", "cat ./.e*", "head -n 1 .en[v]", "wc -c .e?v", "cat .env",
    "cat < .e*", "xxd .e*", "nl .env", "xargs -a .env echo", "timeout 5 xargs -a.env echo",
    "cat .[^x]nv", "cat .[!x]nv", "cat .[[:alpha:]]nv", "cat .e[[:lower:]]v", "cat .[]e]nv",
]
ASK_UNDER_READ_ENV = [
    "git cat-file --batch <<< HEAD:.env", "git cat-file -p HEAD:.env", "git log -p",
    "git log --patch -1", "git log -U3", "git show HEAD", "git diff", "git grep API_KEY",
    "git stash show -p", "for f in .*; do cat \"$f\"; done", "cat $(echo .env)",
    "grep -r API .", "cat .*", "xargs cat <<< .env", "ls | xargs cat",
    "printf '.env\\0' | sort --files0-from=-", "cat ~root/.env", "cat ~+/.env",
]
STILL_FINE_UNDER_READ_ENV = [
    "cat README.md", "wc -l *.md", "git log --oneline -5", "git status", "git diff --stat",
    "ls -la", "basename \"$PWD\"", "echo $(git rev-parse HEAD)", "grep -n x README.md",
]


@pytest.fixture
def proj(tmp_path: Path) -> tuple[Path, Path]:
    cwd, home = tmp_path / "proj", tmp_path / "userhome"
    cwd.mkdir()
    home.mkdir()
    (cwd / ".env").write_text("API_KEY=secret\n")
    (cwd / "README.md").write_text("x\n")
    (cwd / "notes.md").write_text("x\n")
    return cwd, home


@pytest.mark.parametrize("command", READ_ENV)
def test_read_deny_holds_for_every_shell_spelling(proj, command) -> None:
    d = shell(policy(*proj, rules(deny=["Read(.env)"])), command)
    assert d.verdict == "deny", (command, d)


@pytest.mark.parametrize("command", ASK_UNDER_READ_ENV)
def test_commands_that_may_print_a_denied_file_ask(proj, command) -> None:
    d = shell(policy(*proj, rules(deny=["Read(.env)"])), command)
    assert d.verdict != "allow", (command, d)
    # without the deny rule the same commands are ordinary reads (confined)
    plain = shell(policy(*proj, rules()), command)
    assert plain.verdict != "deny", (command, plain)


@pytest.mark.parametrize("command", STILL_FINE_UNDER_READ_ENV)
def test_deny_rules_do_not_block_unrelated_reads(proj, command) -> None:
    d = shell(policy(*proj, rules(deny=["Read(.env)"])), command)
    assert d.verdict == "allow" and d.confine, (command, d)


def test_a_symlink_behind_a_glob_counts_as_outside(proj, tmp_path) -> None:
    cwd, home = proj
    secret = tmp_path / "outside" / "id_rsa"
    secret.parent.mkdir()
    secret.write_text("key\n")
    (cwd / "docs").mkdir()
    (cwd / "docs" / "a.txt").write_text("a\n")
    (cwd / "docs" / "k.txt").symlink_to(secret)
    for command in ("cat docs/*", "cat docs/*.txt", "wc -l docs/?.txt", "head docs/[k].txt"):
        d = shell(policy(cwd, home, rules()), command)
        assert d.verdict == "ask" and "outside the workspace" in d.reason, (command, d)
    d = shell(policy(cwd, home, rules(deny=[f"Read({secret})"])), "cat docs/*")
    assert d.verdict == "deny", d


def test_a_glob_matching_an_option_like_name_asks(proj) -> None:
    cwd, home = proj
    (cwd / "--output=pwn").write_text("")
    d = shell(policy(cwd, home, rules()), "sort *")
    assert d.verdict == "ask", d
    d = shell(policy(cwd, home, rules()), "sort ./*")
    assert d.verdict == "allow", d


def test_a_glob_that_matches_nothing_is_its_own_text(proj) -> None:
    d = shell(policy(*proj, rules(deny=["Read(.env)"])), "cat *.nothing")
    assert d.verdict == "allow", d


# -- wrappers ------------------------------------------------------------------------------

WRAPPED_RM = [
    "nice -n5 rm x", "nice -n 5 rm x", "nice --adjustment 5 rm x", "nice --adjustment=5 rm x",
    "nice --adj=5 rm x", "nice -5 rm x", "stdbuf --output 0 rm x", "stdbuf -o0 rm x",
    "stdbuf --output=L --error 0 rm x", "ionice --class 3 rm x", "ionice -c 3 -n 7 rm x",
    "ionice -c3 rm x", "taskset 0x1 rm x", "taskset -c 0 rm x", "taskset --cpu-list 0 rm x",
    "chrt -f 10 rm x", "chrt --rr 1 rm x", "chrt 0 rm x", "chrt -T 5 -P 10 -d 0 rm x",
    "flock /tmp/l rm x", "flock -w 5 /tmp/l rm x", "flock /tmp/l -c 'rm x'",
    "flock -x /tmp/l --command 'rm x'", "setpriv --reuid=1000 rm x", "setpriv --nnp rm x",
    "script -c 'rm x' /dev/null", "script -qc 'rm x'", "script --command 'rm x'",
    "unshare -r rm x", "unshare --user --map-root-user rm x", "unshare -w /tmp rm x",
    "xargs --process-slot-var X rm", "xargs --process-slot-var=X rm", "xargs -I{} rm {}",
    "xargs -0 -n1 rm", "xargs -a list rm", "command rm x", "command -p rm x", "builtin rm x",
    "exec rm x", "exec -a name rm x", "time rm x", "time -p rm x", "nohup rm x", "doas rm x",
    "doas -u root rm x", "sudo --user root rm x", "sudo -u root -- rm x", "sudo X=1 rm x",
    "timeout --signal KILL 5 rm x", "timeout -sKILL 5 rm x", "timeout -k 1 5 rm x",
    "env rm x", "env -u X rm x", "env X=1 rm x", "nice timeout 5 stdbuf -o0 rm x",
    "setsid -f rm x", "/usr/bin/nice rm x",
]
OPAQUE_RM = [
    "nice --foo rm x", "stdbuf -q rm x", "env -S 'rm x'", "env --split-string='rm x'",
    "git -c alias.x='!rm y' x", "git -c alias.x=!sh x", "git --config-env=alias.x=V x",
    "git -c core.fsmonitor='rm y' status", "git x", "git lg", "strace -f rm x", "watch rm x",
    "ltrace rm x", "unshare -R /tmp rm x", "sudo -e x", "script", "su -c 'rm x'",
    "watch 'rm -rf x'", "toybox rm x", "runuser -u bob -- rm x", "strace -o /dev/null ls",
]


@pytest.mark.parametrize("command", WRAPPED_RM)
def test_deny_holds_behind_every_wrapper_grammar(proj, command) -> None:
    d = shell(policy(*proj, rules(deny=["Bash(rm:*)"])), command)
    assert d.verdict == "deny", (command, d)


@pytest.mark.parametrize("command", OPAQUE_RM)
@pytest.mark.parametrize("mode", ["standard", "unrestricted"])
def test_unknown_wrappers_and_git_aliases_are_opaque(proj, command, mode) -> None:
    d = shell(policy(*proj, rules(deny=["Bash(rm:*)"]), mode), command)
    assert d.verdict != "allow", (command, mode, d)


def test_wrappers_that_run_nothing_are_judged_as_themselves(proj) -> None:
    pol = policy(*proj, rules(deny=["Bash(rm:*)"]))
    for command in ("ionice -p 12", "taskset -p 12", "chrt -p 12", "flock 9", "command -v rm"):
        d = shell(pol, command)
        assert d.verdict != "deny", (command, d)


def test_builtin_git_subcommands_are_not_aliases(proj) -> None:
    for command in ("git status", "git log --oneline", "git rev-parse HEAD"):
        d = shell(policy(*proj, rules()), command)
        assert d.verdict == "allow", (command, d)


@pytest.mark.parametrize(
    ("deny", "command", "verdict"),
    [
        ("Bash(cat .env)", "cat .e*", "ask"), ("Bash(rm x.lock)", "rm *.lock", "ask"),
        ("Bash(rm x.lock)", "rm *.txt", "ask"), ("Bash(cat .env)", "cat *.md", "allow"),
        ("Bash(cat .env)", "cat {.env,x}", "allow"), ("Bash(cat .env:*)", "cat {.env,x}", "deny"),
    ],
)
def test_shell_deny_rules_meet_globs_and_braces(proj, deny, command, verdict) -> None:
    d = shell(policy(*proj, rules(deny=[deny])), command)
    assert d.verdict == verdict, (command, d)


def test_a_cd_through_a_glob_makes_the_directory_unknown(proj, tmp_path) -> None:
    cwd, home = proj
    (cwd / "link").symlink_to(tmp_path)  # `cd l*` would land outside the workspace
    for command in ("cd l* && cat x", "git -C l* log", "env -C l* cat x"):
        d = shell(policy(cwd, home, rules()), command)
        assert d.verdict == "ask", (command, d)
    d = shell(policy(cwd, home, rules()), "cd link && cat x")
    assert d.verdict == "ask" and "outside the workspace" in d.reason, d

"""What a sandboxed shell may read and write: the policy value, its constructors, and its order.

The policy itself is plain data. Constructors only normalise paths (absolute, symlinks of the
roots resolved so Seatbelt's real-path matching sees them) and `check_layout` is the one place
that looks at the disk, to refuse layouts the sandbox could not protect (a symlinked `.tether`).

Rules apply in the order of `ordered_rules`: a deeper path always wins over its ancestors (a
mount only covers what is beneath it, and Seatbelt's last match wins), and on the same path the
reference's category order decides: denied (no read, no write) → writable → read-only.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tether.errors import SandboxError

PolicyKind = Literal["workspace", "memory-subagent", "cross-agent", "confined"]
Access = Literal["deny", "write", "read"]

# Names under every writable root of a workspace that stay read-only, existing or not: a
# sandboxed command must not plant a hook or a settings file for a later unsandboxed run.
PROTECTED_NAMES: tuple[str, ...] = (".git", ".tether")
# The user's credential stores under $HOME (directories and files), hidden from every policy.
CREDENTIAL_DIRS: tuple[str, ...] = (
    ".ssh",
    ".aws",
    ".gnupg",
    ".netrc",
    ".git-credentials",
    ".docker/config.json",
    ".config/gh",
    ".config/hub",
    ".kube",
    ".npmrc",
    ".yarnrc.yml",
    ".pypirc",
    ".pgpass",
    ".my.cnf",
    ".vault-token",
    ".config/gcloud",
    ".azure",
    ".config/doctl",
    ".terraform.d",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".config/op",
    ".password-store",
    ".local/share/keyrings",
    ".config/rclone",
    ".gem/credentials",
    # git's XDG credential store, other agents' and CLIs' tokens, build tools' passwords, and
    # shell histories (tokens pasted on command lines): a confined `grep -R` through a link to
    # $HOME in the workspace reads whatever is not listed here
    ".config/git/credentials",
    ".claude/.credentials.json",
    ".codex/auth.json",
    ".gemini/oauth_creds.json",
    ".letta",
    ".config/github-copilot",
    ".config/configstore",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    ".s3cfg",
    ".boto",
    ".oci",
    ".config/netlify",
    ".config/ngrok",
    ".ngrok2",
    ".fly",
    ".wrangler",
    ".terraformrc",
    ".bash_history",
    ".zsh_history",
    ".local/share/fish/fish_history",
    ".python_history",
    ".psql_history",
    ".mysql_history",
    ".node_repl_history",
)

SYSTEM_SECRETS: tuple[Path, ...] = tuple(
    Path(p) for p in ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
)

DEFAULT_WORKSPACE_PIDS = 1024
DEFAULT_SUBAGENT_PIDS = 512

_ACCESS_RANK: dict[Access, int] = {"deny": 0, "write": 1, "read": 2}
_KINDS: tuple[str, ...] = ("workspace", "memory-subagent", "cross-agent", "confined")


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    kind: PolicyKind
    writable_roots: tuple[Path, ...]
    readonly_roots: tuple[Path, ...]
    denied_roots: tuple[Path, ...]
    restrict_writes: bool
    network: bool
    pids_limit: int | None
    # The private temporary directory (also a writable root); the launcher points TMPDIR at it.
    tmp_dir: Path | None = None
    # Whether commands may open AF_UNIX sockets (and so reach any daemon listening on a path
    # socket they can see); off by default, `socketpair` always works.
    unix_sockets: bool = False

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise SandboxError(f"unknown sandbox policy kind {self.kind!r}")
        for label, roots in (
            ("writable", self.writable_roots),
            ("read-only", self.readonly_roots),
            ("denied", self.denied_roots),
        ):
            for root in roots:
                if not isinstance(root, Path) or not root.is_absolute():
                    raise SandboxError(
                        f"{label} sandbox root {str(root)!r} is not an absolute path"
                    )
        if self.tmp_dir is not None and self.tmp_dir not in self.writable_roots:
            raise SandboxError(f"sandbox tmp dir {self.tmp_dir} must also be a writable root")
        if self.pids_limit is not None and self.pids_limit < 1:
            raise SandboxError(f"sandbox pids limit must be positive, got {self.pids_limit}")


def ordered_rules(policy: SandboxPolicy) -> list[tuple[Path, Access]]:
    """Every root with its access, in application order (parents first; see module docstring).

    A path named in several categories keeps only the one that wins (the later category).
    """
    groups: tuple[tuple[Access, tuple[Path, ...]], ...] = (
        ("deny", policy.denied_roots),
        ("write", policy.writable_roots),
        ("read", policy.readonly_roots),
    )
    winner: dict[Path, Access] = {}
    for access, roots in groups:
        for root in roots:
            winner[root] = access  # later categories win on the same path
    return sorted(winner.items(), key=lambda item: (len(item[0].parts), _ACCESS_RANK[item[1]]))


def workspace_policy(
    root: Path | str,
    *,
    isolation_root: Path | str | None = None,
    tmp_dir: Path | str,
    network: bool = False,
    home: Path | str | None = None,
    pids_limit: int | None = DEFAULT_WORKSPACE_PIDS,
) -> SandboxPolicy:
    """Writes only under `root` and the private `tmp_dir`; `.git`/`.tether` in them read-only.

    `isolation_root` (a directory strictly containing `root`, e.g. the folder of all worktrees)
    is hidden entirely so sibling workspaces are neither readable nor writable. The user's
    credential directories (`~/.ssh`, `~/.aws`, `~/.gnupg`) are hidden too.
    """
    root_path = _absolute(root, "workspace root")
    tmp_path = _absolute(tmp_dir, "sandbox tmp dir")
    denied: list[Path] = []
    if isolation_root is not None:
        isolation = _absolute(isolation_root, "isolation root")
        if root_path == isolation or not root_path.is_relative_to(isolation):
            raise SandboxError(
                f"workspace root {root_path} must be strictly inside isolation root {isolation}"
            )
        denied.append(isolation)
    denied.extend(_credential_dirs(home))
    writable = _unique([root_path, tmp_path])
    policy = SandboxPolicy(
        kind="workspace",
        writable_roots=writable,
        readonly_roots=tuple(w / name for w in writable for name in PROTECTED_NAMES),
        denied_roots=_unique(denied),
        restrict_writes=True,
        network=network,
        pids_limit=pids_limit,
        tmp_dir=tmp_path,
    )
    check_layout(policy)
    return policy


def confined_policy(
    tmp_dir: Path | str,
    *,
    home: Path | str | None = None,
    hidden: Sequence[Path | str] = (),
    pids_limit: int | None = DEFAULT_WORKSPACE_PIDS,
) -> SandboxPolicy:
    """Read-only confinement for commands admitted without a human: nothing writable but the
    private `tmp_dir`, no network, no Unix sockets, the user's credential paths and `hidden`
    (tether's home, say) unreadable. `tmp_dir` may lie inside a hidden path: it stays usable.
    """
    tmp_path = _absolute(tmp_dir, "sandbox tmp dir")
    denied = [
        *_credential_dirs(home),
        *(_absolute(p, "hidden path") for p in hidden),
        # Readable by a root-run tether as their owner, even with no capabilities left.
        *(p for p in SYSTEM_SECRETS if os.path.lexists(p)),
    ]
    policy = SandboxPolicy(
        kind="confined",
        writable_roots=(tmp_path,),
        readonly_roots=(),
        denied_roots=_unique(denied),
        restrict_writes=True,
        network=False,
        pids_limit=pids_limit,
        tmp_dir=tmp_path,
    )
    check_layout(policy)
    return policy


def memory_subagent_policy(
    tether_home: Path | str,
    agent_id: str | None,
    parent_id: str | None = None,
    *,
    home: Path | str | None = None,
    tmp_dir: Path | str | None = None,
    extra_writable: Sequence[Path | str] = (),
    network: bool = True,
    pids_limit: int | None = DEFAULT_SUBAGENT_PIDS,
    base_writable: Sequence[Path | str] = (),
    hidden_agents: Sequence[str] | None = None,
    writable_memories: Sequence[str] = (),
    readonly: Sequence[Path | str] = (),
) -> SandboxPolicy:
    """Writes only into the agent's own memory dir (plus `tmp_dir` and `extra_writable`).

    Every agent tree under `<tether_home>/agents` is hidden except the agent's own and its
    parent's, which stay readable; the user's credential directories are hidden. Network stays
    on by default because the confined process is the subagent itself, which calls its model.

    For a whole subagent process (reference §8: "base writable ~/.letta; deny trees; self/parent
    agent dirs readable; own memory writable") the keywords widen and narrow that:
    `base_writable` roots are writable underneath everything else (tether home, where the child
    keeps its own records and transcript); `hidden_agents` names the agent trees to hide one by
    one instead of the whole agents folder (a subagent not created yet must be able to create
    its own there; `agent_id` None); `writable_memories` are agents whose memory dirs are
    writable too (the parent's, which a memory subagent edits), their `.git/config` and
    `.git/hooks` (those that exist) kept read-only so nothing planted there runs later outside
    the sandbox;
    `readonly` roots (the workspace, settings files) stay read-only even under a writable base.
    """
    agents = _absolute(tether_home, "tether home") / "agents"
    # tether's compiled helpers (landlock-exec, armed-guard) run outside any sandbox later: a
    # subagent that may write tether's home must not be able to replace them.
    readable: list[Path] = [agents.parent / "bin"]
    writable: list[Path] = [_absolute(p, "base writable root") for p in base_writable]
    if agent_id is not None:
        own = agents / _agent_segment(agent_id)
        readable.append(own)
        writable.append(own / "memory")
    if parent_id is not None:
        readable.append(agents / _agent_segment(parent_id))
    for name in writable_memories:
        memory = agents / _agent_segment(name) / "memory"
        writable.append(memory)
        # Only existing ones: bwrap would occupy a missing name with a directory.
        git = memory / ".git"
        readable.extend(p for p in (git / "config", git / "hooks") if os.path.lexists(p))
    readable.extend(_absolute(p, "read-only root") for p in readonly)
    tmp_path = _absolute(tmp_dir, "sandbox tmp dir") if tmp_dir is not None else None
    writable.extend(_absolute(p, "extra writable root") for p in extra_writable)
    if tmp_path is not None:
        writable.append(tmp_path)
    if hidden_agents is None:
        hidden = [agents]
    else:
        keep = {agent_id, parent_id, *writable_memories}
        hidden = [agents / _agent_segment(a) for a in hidden_agents if a not in keep]
    policy = SandboxPolicy(
        kind="memory-subagent",
        writable_roots=_unique(writable),
        readonly_roots=_unique(readable),
        denied_roots=_unique([*hidden, *_credential_dirs(home)]),
        restrict_writes=True,
        network=network,
        pids_limit=pids_limit,
        tmp_dir=tmp_path,
    )
    check_layout(policy)
    return policy


def cross_agent_policy(
    tether_home: Path | str,
    self_id: str,
    parent_id: str | None,
    *,
    network: bool = True,
    pids_limit: int | None = None,
) -> SandboxPolicy:
    """An ordinary agent shell that cannot see other agents' trees: own tree stays writable,
    the parent's readable, writes anywhere else allowed."""
    agents = _absolute(tether_home, "tether home") / "agents"
    readable = [agents / _agent_segment(parent_id)] if parent_id is not None else []
    return SandboxPolicy(
        kind="cross-agent",
        writable_roots=(agents / _agent_segment(self_id),),
        readonly_roots=tuple(readable),
        denied_roots=(agents,),
        restrict_writes=False,
        network=network,
        pids_limit=pids_limit,
    )


def check_layout(policy: SandboxPolicy) -> None:
    """Refuse, before anything runs, a layout the sandbox could not enforce.

    A read-only root that is a symlink would be protected at its target while the link itself
    stays replaceable (case c3), so it is an error; for a workspace every writable root must be
    an existing directory.
    """
    for ro in policy.readonly_roots:
        try:
            st = os.lstat(ro)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(ro)
            raise SandboxError(
                f"refusing to start the sandbox: {ro} is a symlink (to {target}), so it could "
                f"not be kept read-only; replace it with a real directory or file"
            )
    if policy.kind in ("workspace", "confined"):
        for root in policy.writable_roots:
            if not root.is_dir():
                raise SandboxError(
                    f"refusing to start the sandbox: writable root {root} is not an existing "
                    f"directory"
                )


def _absolute(path: Path | str, label: str) -> Path:
    p = Path(path)
    if not p.is_absolute():
        raise SandboxError(f"{label} {str(path)!r} must be an absolute path")
    # Resolve the root itself (macOS /tmp → /private/tmp); names under it are joined later and
    # never resolved, so a symlinked `.tether` is seen as the symlink it is.
    return p.resolve()


def _credential_dirs(home: Path | str | None) -> list[Path]:
    base = Path(home) if home is not None else Path.home()
    base = _absolute(base, "home directory")
    return [base / name for name in CREDENTIAL_DIRS]


def _agent_segment(agent_id: str) -> str:
    if not agent_id or agent_id in (".", "..") or "/" in agent_id or "\0" in agent_id:
        raise SandboxError(f"agent id {agent_id!r} is not a single path segment")
    return agent_id


def _unique(paths: Iterable[Path]) -> tuple[Path, ...]:
    return tuple(dict.fromkeys(paths))

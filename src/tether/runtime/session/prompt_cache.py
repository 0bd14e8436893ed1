"""The compiled system prompt of a conversation, and when it may be reused (reference §4.5).

    compiled = base system (agent system + <env>)
             + <self> / <memory> blocks from `system/` at MemFS HEAD (+ the other memory files,
               by path and description only)
             + project instructions (AGENTS.md, CLAUDE.md: TETHER_HOME's, then from the
               repository root down to the working directory; `runtime/session/instructions.py`)
             + <available_skills>
             + <memory_metadata>

It is stored per conversation in `system-prompt.json` = {content, coreMemory, compiledAt,
rawSystemHash, memfsRevision}. `rawSystemHash` is the sha256 of everything that is not memory
(base system, project instructions, the skills found outside memory); `memfsRevision` is the
memory's HEAD commit. A send reuses the stored prompt iff both match; checking costs one read of
the git ref file, no subprocess. A prompt is compiled only on a miss.

What a prompt takes from the memory at one commit (the rendered core memory and the memory's own
skills) is also kept per agent, in `agents/<id>/memory-render.json` = {version, revision,
coreMemory, skills}. A commit sha names its content, so that render never goes stale; `version`
is the render format's. Every `tether -p` starts a new conversation, so without it each run would
read the memory tree with git (`ls-tree` + `cat-file`) only to render the same text again.

Memory changing mid-conversation (a `memory` tool commit between two sends): the reference
keeps the prompt and sends a `<memory_update>` system message on Anthropic models that accept
system messages mid-conversation. The local backend's provider request carries one system
string and no mid-conversation system role, so tether recompiles instead: the next send of the
same turn already sees the new memory, on every provider. The cost is a provider-side prompt
cache miss on the system prefix after a memory edit.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from tether.backends.local.locks import write_json_atomic
from tether.memory import blocks
from tether.memory.memfs import MemFSError
from tether.protocol.turns import ConversationRef
from tether.runtime.session.instructions import read_project_instructions

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tether.backends.local.backend import LocalBackend
    from tether.backends.local.records import AgentRecord
    from tether.backends.store_api import ConversationStore
    from tether.core.services import Services
    from tether.core.tools import ToolRegistry
    from tether.memory.memfs import MemFS
    from tether.runtime.extensions.skills import Skill, SkillCatalog
    from tether.runtime.session.initial_blocks import InitialBlock

CACHE_FILE = "system-prompt.json"
RENDER_FILE = "memory-render.json"  # beside the agent's memory repo, not inside it
# Bump when a commit would render differently: render_memory / MEMORY_INTRO, blocks.parse, or
# what parse_skill makes of a SKILL.md. A render file of another version is a miss.
RENDER_VERSION = 2  # 2: SKILL.md frontmatter read as YAML
PERSONA = "system/persona.md"
MEMORY_INTRO = (
    "This is your memory: a git repository of Markdown files that persists across "
    "conversations. Blocks under system/ are shown below; other files are listed by path and "
    "description (read them when relevant). Change memory with the `memory` tool; every change "
    "is a commit, and only committed changes appear here."
)


def render_memory(files: dict[str, bytes]) -> str:
    """The memory section from HEAD's files: persona as <self>, system/ blocks in <memory>,
    the rest (skills/ and mods/ aside) listed by path and description."""
    persona = ""
    system: list[str] = []
    external: list[str] = []
    for path in sorted(files):
        if not path.endswith(".md"):
            continue
        parsed = blocks.parse(files[path].decode("utf-8", errors="replace"))
        if path == PERSONA:
            persona = parsed.body.strip()
        elif path.startswith("system/"):
            attrs = f'path="{path}"'
            if parsed.description:
                attrs += f' description="{_attr(parsed.description)}"'
            if parsed.read_only:
                attrs += ' read_only="true"'
            system.append(f"<block {attrs}>\n{parsed.body.strip()}\n</block>")
        elif not path.startswith(("skills/", "mods/")):
            external.append(f"- {path}: {parsed.description}" if parsed.description else f"- {path}")
    out = []
    if persona:
        out.append(f"<self>\n{persona}\n</self>")
    body = [MEMORY_INTRO]
    body.extend(system or ["(no blocks in system/ yet)"])
    if external:
        body.append("<memory_files>\n" + "\n".join(external) + "\n</memory_files>")
    out.append("<memory>\n" + "\n\n".join(body) + "\n</memory>")
    return "\n\n".join(out)


@dataclass(frozen=True, slots=True)
class MemoryRender:
    """What the system prompt takes from the memory at one commit."""

    core: str  # render_memory(files)
    skills: tuple[Skill, ...]  # the memory's skills/<name>/SKILL.md, whatever the skill sources


def memory_render(memfs: MemFS, revision: str | None) -> MemoryRender:
    """The memory at commit `revision`, rendered: from the agent's render file when it holds
    that commit, else read with git (MemFSError if that fails) and stored for the next run."""
    from tether.runtime.extensions.skills import skills_in_memory

    path = memfs.root.parent / RENDER_FILE
    if revision is not None:  # no commit yet: nothing worth keeping
        hit = _load_render(path, revision)
        if hit is not None:
            return hit
    files = memfs.read_head_tree(rev=revision)
    render = MemoryRender(render_memory(files), tuple(skills_in_memory(files)))
    if revision is not None:
        _store_render(path, revision, render)
    return render


class SystemPrompt:
    """Resolves one conversation's system prompt per send: stored one if fresh, else compiled.

    Passed to `LocalBackend.system_prompt`; `compilations` counts real compilations (tests and
    benchmarks read it)."""

    def __init__(
        self,
        *,
        base: str,
        cache_dir: Callable[[ConversationRef], Path],
        memfs: MemFS | None = None,
        skills: SkillCatalog | None = None,
        project_instructions: str = "",
    ) -> None:
        self.base = base
        self.cache_dir = cache_dir
        self.memfs = memfs
        self.skills = skills
        self.project_instructions = project_instructions
        self.compilations = 0
        # Providers that take system messages mid-conversation (hosted Chat Completions) get a
        # memory change as a `<memory_update>` message and keep their cached prompt prefix.
        self.mid_conversation_updates = False
        self._raw_hash = _sha256(
            "\0".join([base, project_instructions, self._external_skills_text()])
        )
        self._last: tuple[ConversationRef, str | None, str] | None = None

    @property
    def raw_hash(self) -> str:
        return self._raw_hash

    async def __call__(self, conversation: ConversationRef) -> str:
        hit = self.cached(conversation)
        if hit is not None:
            return hit
        return await asyncio.to_thread(self.compile, conversation)

    async def with_update(self, conversation: ConversationRef) -> tuple[str, str | None]:
        """The system prompt and, where the provider takes it, the latest `<memory_update>`."""
        if self.mid_conversation_updates and self.memfs is not None:
            kept = await asyncio.to_thread(self._update_in_place, conversation)
            if kept is not None:
                return kept
        return await self(conversation), None

    def _update_in_place(self, conversation: ConversationRef) -> tuple[str, str | None] | None:
        """Same raw system, newer memory revision: keep the stored prompt, record the memory at
        the new revision as its update (newer memory wins), and return both."""
        assert self.memfs is not None
        path = self.cache_dir(conversation) / CACHE_FILE
        data = _read_json(path)
        if not (isinstance(data, dict) and data.get("rawSystemHash") == self._raw_hash
                and isinstance(data.get("content"), str)):
            return None
        revision = self.memfs.revision()
        update = data.get("memoryUpdate") if isinstance(data.get("memoryUpdate"), str) else None
        if data.get("memfsRevision") != revision:
            try:
                core = memory_render(self.memfs, revision).core
            except MemFSError:
                return None
            update = (
                f'<memory_update revision="{revision or "none"}">\n'
                "Your memory changed since this conversation's system prompt was compiled; "
                "this is the current content (it replaces the <memory> above):\n"
                f"{core}\n</memory_update>"
            )
            write_json_atomic(path, {**data, "memfsRevision": revision, "coreMemory": core,
                                "memoryUpdate": update})
        self._last = (conversation, revision, data["content"])
        return data["content"], update

    def resolve(self, conversation: ConversationRef) -> str:
        """The synchronous form, for callers outside an event loop (CLI, benchmarks)."""
        hit = self.cached(conversation)
        return hit if hit is not None else self.compile(conversation)

    def cached(self, conversation: ConversationRef) -> str | None:
        """The stored prompt if its hash and memory revision are current, else None."""
        revision = self.memfs.revision() if self.memfs is not None else None
        last = self._last
        if last is not None and last[0] == conversation and last[1] == revision:
            return last[2]
        data = _read_json(self.cache_dir(conversation) / CACHE_FILE)
        if (
            isinstance(data, dict)
            and data.get("rawSystemHash") == self._raw_hash
            and data.get("memfsRevision") == revision
            and isinstance(data.get("content"), str)
        ):
            self._last = (conversation, revision, data["content"])
            return data["content"]
        return None

    def compile(self, conversation: ConversationRef) -> str:
        """Compile from HEAD and store it; the memory read pins one revision for the whole prompt."""
        self.compilations += 1
        memfs = self.memfs
        revision = memfs.revision() if memfs is not None else None
        core_memory = ""
        agent_skills = None
        readable = True
        if memfs is not None:
            try:
                render = memory_render(memfs, revision)
            except MemFSError as exc:  # a broken memory must not stop the conversation
                readable = False
                core_memory = f"<memory>\nYour memory could not be read: {exc}\n</memory>"
            else:
                core_memory = render.core
                if self.skills is not None and self.skills.includes_agent:
                    agent_skills = list(render.skills)
        compiled_at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        sections = [self.base.strip()]
        if core_memory:
            sections.append(core_memory)
        if self.project_instructions:
            sections.append(self.project_instructions)
        if self.skills is not None and self.skills.enabled:
            from tether.runtime.extensions.skills import render_available

            listing = render_available(self.skills.all(agent_skills or []).values())
            if listing:
                sections.append(listing)
        meta = [f"AGENT_ID: {conversation.agent_id}", f"CONVERSATION_ID: {conversation.conversation_id}"]
        if memfs is not None:
            meta += [f"MEMORY_DIR: {memfs.root}", f"MEMORY_REVISION: {revision or 'none'}"]
        meta.append(f"COMPILED_AT: {compiled_at}")
        sections.append("<memory_metadata>\n" + "\n".join(meta) + "\n</memory_metadata>")
        content = "\n\n".join(sections)
        record = {
            "content": content,
            "coreMemory": core_memory,
            "compiledAt": compiled_at,
            "rawSystemHash": self._raw_hash,
            "memfsRevision": revision,
        }
        if readable:  # an unreadable memory is retried on the next send, not cached
            write_json_atomic(self.cache_dir(conversation) / CACHE_FILE, record)
            self._last = (conversation, revision, content)
        return content

    def _external_skills_text(self) -> str:
        if self.skills is None or not self.skills.enabled:
            return ""
        return "\n".join(f"{s.source}\t{s.name}\t{s.description}" for s in self.skills.external)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def _read_json(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except (FileNotFoundError, NotADirectoryError, orjson.JSONDecodeError):
        return None  # absent or damaged: compile again and replace it


def _load_render(path: Path, revision: str) -> MemoryRender | None:
    """The stored render of `revision`, or None if the file is absent, damaged, of another
    version or revision, or not the expected shape (the caller then renders and replaces it)."""
    from tether.runtime.extensions.skills import Skill

    try:
        data = _read_json(path)
    except OSError:  # unreadable (permissions, a directory in the way): render again
        return None
    if not (
        isinstance(data, dict)
        and data.get("version") == RENDER_VERSION
        and data.get("revision") == revision
        and isinstance(data.get("coreMemory"), str)
        and isinstance(data.get("skills"), list)
    ):
        return None
    names = [f.name for f in fields(Skill)]
    skills = []
    for item in data["skills"]:
        if not (
            isinstance(item, dict)
            and all(isinstance(item.get(n), str) for n in names)
            and item["source"] == "agent"  # any other source would break precedence
        ):
            return None
        skills.append(Skill(**{n: item[n] for n in names}))
    return MemoryRender(data["coreMemory"], tuple(skills))


def _store_render(path: Path, revision: str, render: MemoryRender) -> None:
    from tether.runtime.extensions.skills import Skill

    names = [f.name for f in fields(Skill)]
    record = {
        "version": RENDER_VERSION,
        "revision": revision,
        "coreMemory": render.core,
        "skills": [{n: getattr(skill, n) for n in names} for skill in render.skills],
    }
    # Only a speed-up: a render that cannot be stored is rendered again by the next run.
    with contextlib.suppress(OSError):
        write_json_atomic(path, record)


def project_trusted(settings_trust: str | None, trust_flag: bool, home: Path, cwd: Path) -> bool:
    """Whether this folder's `.tether/` may supply skills: the settings' verdict when the folder
    has project settings, else `--trust` or the trust store."""
    if settings_trust is not None:
        return settings_trust == "trusted"
    if trust_flag:
        return True
    from tether.runtime.policy.trust import TrustStore

    return TrustStore(home).state(cwd) == "trusted"


def attach_memory(
    *,
    registry: ToolRegistry,
    backend: LocalBackend,
    store: ConversationStore,
    agent: AgentRecord,
    cwd: Path,
    trusted: bool,
    skills_dir: str | None,
    skill_sources: list[str] | None,
    no_skills: bool,
    no_bundled_skills: bool,
    services: Services,
    warn: Callable[[str], None],
    initial: Sequence[InitialBlock] = (),
    memory_tools: Sequence[str] = ("memory",),
) -> SystemPrompt:
    """Open (or create) the agent's MemFS, register the `memory` and `Skill` tools, and give
    the backend the memory-aware system prompt. Without git, the run goes on without memory.
    `initial`: a new agent's blocks (`runtime/session/initial_blocks.py`), committed before the prompt
    is compiled so the first turn already sees them. `memory_tools`: which of `memory` and
    `memory_apply_patch` to register (`tools.toolsets.memory_tool_names`)."""
    from tether.memory.memfs import MemFS
    from tether.runtime.extensions.skills import discover_skills, resolve_sources
    from tether.tools.memory import MemoryTool
    from tether.tools.memory_patch import MemoryPatchTool
    from tether.tools.skill import SkillTool

    if skills_dir and not no_skills and not Path(skills_dir).expanduser().is_dir():
        from tether.errors import UsageError

        raise UsageError(f"--skills {skills_dir}: not a directory")
    memfs: MemFS | None
    try:
        memfs = MemFS.open(store.home, agent.id, agent_name=agent.name)
    except MemFSError as exc:
        warn(f"agent memory is off for this run: {exc}")
        memfs = None
    if initial:
        if memfs is None:
            raise MemFSError("the memory blocks asked for (--init-blocks, --memory-blocks, "
                             "--block-value) need the agent's memory, which is off")
        from tether.runtime.session.initial_blocks import write_initial_blocks

        write_initial_blocks(memfs, initial)
    sources = resolve_sources(
        skill_sources=skill_sources, no_skills=no_skills, no_bundled=no_bundled_skills
    )
    catalog = discover_skills(
        home=store.home,
        cwd=cwd,
        sources=sources,
        project_trusted=trusted,
        skills_dir=Path(skills_dir).expanduser().resolve() if skills_dir else None,
        memfs=memfs,
    )
    for message in catalog.ignored:
        warn(f"skipping skill {message}")
    if memfs is not None:
        if "memory" in memory_tools:
            registry.register(MemoryTool(memfs))
        if "memory_apply_patch" in memory_tools:
            registry.register(MemoryPatchTool(memfs))
        services.memfs = memfs
    if catalog.enabled:
        registry.register(SkillTool(catalog))
    prompt = SystemPrompt(
        base=backend.system,
        cache_dir=lambda c: store.conversation_dir(c.agent_id, c.conversation_id),
        memfs=memfs,
        skills=catalog if catalog.enabled else None,
        project_instructions=read_project_instructions(cwd, store.home),
    )
    # Hosted Chat Completions takes system messages anywhere; local servers' chat templates
    # often do not, and Anthropic / Responses keep system apart: those recompile instead.
    prompt.mid_conversation_updates = backend.provider_name == "openai-chat"
    backend.system_prompt = prompt
    services.system_prompt = prompt
    services.skills = catalog
    return prompt

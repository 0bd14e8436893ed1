"""The user's choices for one run (reference §1.2), as the command line or a frontend gave them.

Frontends build a RunFlags (cli/flags.py parses the command line into one; the App Server and the
TUI fill one per conversation); runtime/session/assembly.py builds the session from it. It lives here, not
in cli/, because every frontend and the session builder read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class RunFlags:
    headless: bool
    prompt: str | None  # None: read from stdin
    model: str | None = None
    agent: str | None = None
    new_agent: bool = False
    conversation: str | None = None
    new_conversation: bool = False
    max_turns: int | None = None
    output_format: str = "text"
    input_format: str | None = None
    include_partial: bool = False
    permission_mode: str = "standard"
    permission_mode_given: bool = False  # False: settings files may choose the mode
    trust: bool = False  # --trust: apply this folder's project settings for this run
    system_preset: str | None = None
    system_custom: str | None = None
    system_append: str | None = None
    allowed_tools: list[str] = field(default_factory=list)
    disallowed_tools: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    tools: list[str] | None = None  # None: every tool; [] (from --tools ""): none
    no_mods: bool = False  # --no-mods: load no mods this run (also TETHER_DISABLE_MODS=1)
    skills_dir: str | None = None  # --skills DIR: the project skills folder for this run
    skill_sources: list[str] | None = None  # None: all sources
    no_skills: bool = False
    no_bundled_skills: bool = False
    resume: bool = False  # -r/--resume (interactive): reopen this agent's latest conversation
    continue_last: bool = False  # -c/--continue: this folder's most recent conversation
    reflection_trigger: str | None = None  # None: the agent's saved choice (runtime/agents/reflection)
    reflection_step_count: int | None = None
    mcp_config: list[str] = field(default_factory=list)  # --mcp-config FILE|JSON, repeatable
    strict_mcp_config: bool = False  # --strict-mcp-config: only the --mcp-config servers
    backend: str | None = None  # --backend local|cloud|api; None: the saved default (runtime/session/backend_choice)
    init_blocks: str | None = None  # --init-blocks LABELS (a new agent's preset blocks)
    memory_blocks: str | None = None  # --memory-blocks JSON
    block_values: list[str] = field(default_factory=list)  # --block-value LABEL=VALUE
    toolset: str = "auto"  # --toolset auto|default|codex|codex_snake|gemini (tools/toolsets.py)
    base_tools: list[str] | None = None  # --base-tools a,b: built-in tools instead of the toolset's

"""What the model is told about Grep: its description, its JSON schema, the output modes and the
`type` names it accepts (ripgrep's, for the common languages)."""

from __future__ import annotations

from typing import Any

OUTPUT_MODES = ("content", "files_with_matches", "count")

FILE_TYPES: dict[str, tuple[str, ...]] = {
    "py": (".py", ".pyi"),
    "js": (".js", ".mjs", ".cjs", ".jsx"),
    "ts": (".ts", ".tsx", ".mts", ".cts"),
    "rust": (".rs",),
    "go": (".go",),
    "java": (".java",),
    "kotlin": (".kt", ".kts"),
    "c": (".c", ".h"),
    "cpp": (".cpp", ".cc", ".cxx", ".hpp", ".hh", ".hxx", ".h"),
    "cs": (".cs",),
    "rb": (".rb",),
    "php": (".php",),
    "swift": (".swift",),
    "sh": (".sh", ".bash", ".zsh"),
    "md": (".md", ".markdown", ".mdx"),
    "json": (".json", ".jsonl"),
    "yaml": (".yaml", ".yml"),
    "toml": (".toml",),
    "html": (".html", ".htm"),
    "css": (".css", ".scss", ".sass", ".less"),
    "sql": (".sql",),
    "txt": (".txt",),
    "xml": (".xml",),
}
TYPE_ALIASES = {"rs": "rust", "python": "py", "markdown": "md", "ruby": "rb", "yml": "yaml"}

GREP_DESCRIPTION = """\
Searches file contents with a regular expression (ripgrep-style interface).

- Always use Grep for content search rather than `grep`/`rg` through Bash.
- Full regex syntax (Python `re`, close to ripgrep's): e.g. `log.*Error`, `def\\s+\\w+`. Escape \
literal braces and parentheses (`interface\\{\\}` finds `interface{}`).
- Filter files with `glob` (e.g. `*.js`, `**/*.{ts,tsx}`) or `type` (e.g. `py`, `js`, `ts`, \
`rust`, `go`, `md`, `json`).
- `output_mode`: `files_with_matches` (default) lists matching files, newest first; `content` \
shows matching lines (with `-n` line numbers on by default and `-A`/`-B`/`-C` context); `count` \
shows the number of matching lines per file.
- Page long results with `head_limit` and `offset`. Output is capped at 10000 characters.
- Patterns match within one line unless `multiline: true`, where `.` also matches newlines.
- Binary files, `.git` and files over 5 MiB are not searched."""

GREP_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string", "description": "The regular expression to search for"},
        "path": {"type": "string", "description": "File or directory (default: working directory)"},
        "glob": {"type": "string", "description": 'Filter files, e.g. "*.js", "*.{ts,tsx}"'},
        "output_mode": {"type": "string", "enum": list(OUTPUT_MODES)},
        "-B": {"type": "number", "description": "Lines before each match (content mode)"},
        "-A": {"type": "number", "description": "Lines after each match (content mode)"},
        "-C": {"type": "number", "description": "Lines around each match (content mode)"},
        "-n": {"type": "boolean", "description": "Line numbers (content mode; default true)"},
        "-i": {"type": "boolean", "description": "Case insensitive"},
        "type": {"type": "string", "description": "File type: py, js, ts, rust, go, java, md, json…"},
        "head_limit": {"type": "number", "description": "Only the first N lines/entries"},
        "offset": {"type": "number", "description": "Skip the first N lines/entries"},
        "multiline": {"type": "boolean", "description": "`.` matches newlines; patterns span lines"},
    },
    "required": ["pattern"],
    "additionalProperties": False,
}

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
        "pattern": {
            "type": "string",
            "description": "The regular expression pattern to search for in file contents",
        },
        "path": {
            "type": "string",
            "description": "File or directory to search in. Defaults to the working directory.",
        },
        "glob": {
            "type": "string",
            "description": 'Glob pattern to filter files (e.g. "*.js", "*.{ts,tsx}")',
        },
        "output_mode": {
            "type": "string",
            "enum": list(OUTPUT_MODES),
            "description": (
                'Output mode: "content" shows matching lines (supports -A/-B/-C context, -n line '
                'numbers, head_limit), "files_with_matches" shows file paths (supports '
                'head_limit), "count" shows match counts (supports head_limit). Defaults to '
                '"files_with_matches".'
            ),
        },
        "-B": {
            "type": "number",
            "description": 'Lines to show before each match. Requires output_mode: "content".',
        },
        "-A": {
            "type": "number",
            "description": 'Lines to show after each match. Requires output_mode: "content".',
        },
        "-C": {
            "type": "number",
            "description": (
                'Lines to show before and after each match. Requires output_mode: "content".'
            ),
        },
        "-n": {
            "type": "boolean",
            "description": (
                'Show line numbers in output. Requires output_mode: "content". Defaults to true.'
            ),
        },
        "-i": {"type": "boolean", "description": "Case insensitive search"},
        "type": {
            "type": "string",
            "description": "File type to search, e.g. py, js, ts, rust, go, java, md, json.",
        },
        "head_limit": {
            "type": "number",
            "description": (
                "Limit output to the first N lines/entries (like `| head -N`) in every output "
                "mode. 0 or absent means no limit (the 10000-character cap still applies)."
            ),
        },
        "offset": {
            "type": "number",
            "description": "Skip the first N lines/entries before applying head_limit. Default 0.",
        },
        "multiline": {
            "type": "boolean",
            "description": (
                "Enable multiline mode where . matches newlines and patterns can span lines. "
                "Default: false."
            ),
        },
    },
    "required": ["pattern"],
    "additionalProperties": False,
}

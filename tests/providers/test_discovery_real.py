"""Discovery against the real llama.cpp server (llama-cpp-python) that .ci/run installs."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tests.e2e.support import run_tether
from tests.real.test_llama_cpp import llama_url  # noqa: F401 - the server fixture
from tether.providers.base import Endpoint
from tether.providers.discovery import choose_model, list_models


def test_the_real_server_lists_its_model_and_a_wrong_name_is_refused(
    llama_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    endpoint = Endpoint("llama.cpp", llama_url, "not-needed", 30.0)
    models = asyncio.run(list_models(endpoint))
    assert len(models) == 1 and models[0].id.endswith(".gguf")
    assert asyncio.run(choose_model(endpoint, "default", None)) == models[0].id
    assert asyncio.run(choose_model(endpoint, "smollm2", None)) == models[0].id
    env = {**os.environ, "LLAMA_CPP_BASE_URL": llama_url, "TETHER_HOME": str(tmp_path / "home")}
    run = run_tether(
        ["-p", "hi", "--model", "llama.cpp/no-such-model", "--output-format", "json"],
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert run.code != 0
    assert "has no model 'no-such-model'" in run.stdout + run.stderr
    assert models[0].id in run.stdout + run.stderr

"""What the daily update check costs a run's start in an installed tether: `startup_check`, which
must start the check in the background and never wait for the index or the install.

Run: .venv/bin/python bench/update_check.py [--runs 5] [--index-delay-ms 2000]

Builds two tether wheels, serves them as a package index on 127.0.0.1 that answers each request
only after --index-delay-ms, installs the older one into a fresh venv (offline: the dev
environment's dependencies are shared with it, as in tests/e2e/test_update.py), then times
`startup_check` in that venv's Python with a due check (a fresh TETHER_HOME per run). A figure
near the delay means the start waited for the network. Moved here from a timed assertion in
tests/e2e/test_update.py, which keeps the behaviour (the background check updates, the notice
shows once on the next start).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tests.e2e.test_update import (  # noqa: E402
    NEW,
    OLD,
    build_wheel,
    clean_env,
    run,
    share_dependencies,
    write_index,
)

CODE = (
    "import os, pathlib, time\n"
    "from tether.runtime.updater import startup_check\n"
    "t = time.perf_counter()\n"
    "startup_check(os.environ, pathlib.Path(os.environ['TETHER_HOME']))\n"
    "print(round((time.perf_counter() - t) * 1000, 1))\n"
)


class _SlowIndex(SimpleHTTPRequestHandler):
    delay_s = 0.0

    def do_GET(self) -> None:
        time.sleep(type(self).delay_s)
        super().do_GET()

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--index-delay-ms", type=float, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        (tmp / "built").mkdir()
        write_index(tmp / "index", [build_wheel(OLD, tmp / "built"), build_wheel(NEW, tmp / "built")])
        server = ThreadingHTTPServer(("127.0.0.1", 0),
                                     partial(_SlowIndex, directory=str(tmp / "index")))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/simple"
        env = clean_env(tmp)
        subprocess.run([sys.executable, "-m", "venv", str(tmp / "venv")], check=True, env=env)
        share_dependencies(next((tmp / "venv" / "lib").glob("python3*/site-packages")), tmp)
        python = str(tmp / "venv" / "bin" / "python")
        done = run([python, "-m", "pip", "install", "-q", "--index-url", url, f"tether=={OLD}"], env)
        if done.returncode != 0:
            raise SystemExit(f"installing tether {OLD} failed:\n{done.stderr}")
        _SlowIndex.delay_s = args.index_delay_ms / 1000
        costs = []
        for i in range(args.runs):
            home = tmp / f"home-{i}"
            child = run([python, "-c", CODE], {**env, "TETHER_HOME": str(home),
                                               "TETHER_UPDATE_INDEX_URL": url})
            if child.returncode != 0:
                raise SystemExit(child.stderr)
            costs.append(float(child.stdout))
        server.shutdown()
    print(f"startup_check with a due check: {statistics.median(costs):.1f} ms (median of "
          f"{args.runs}; the index answers after {args.index_delay_ms:.0f} ms)")


if __name__ == "__main__":
    main()

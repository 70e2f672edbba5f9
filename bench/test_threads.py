"""torch's intra-op threads under the test command's load: the reproducibility test's short warm start (six SFT
steps of the calculator agent on the built-in tiny model, three dev checks) with one thread and with two, alternated,
while a second process with the same setting keeps the other core busy with the same work, as the backends' suites
do beside the core's.

    python bench/test_threads.py [--rounds 3]

Prints each timing and the median ratio two threads / one thread (scripts/test.sh sets OMP_NUM_THREADS=1).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ONE_RUN = """
import sys, tempfile, time, pathlib, pytest, torch
sys.path.insert(0, "tests")
from test_reproducible import short_warm_start
torch.set_num_threads(int(sys.argv[1]))
patch = pytest.MonkeyPatch()
start = time.perf_counter()
short_warm_start(pathlib.Path(tempfile.mkdtemp()) / "run", patch)
print(time.perf_counter() - start)
"""


def warm_start_seconds(threads: int, env: dict[str, str]) -> float:
    """One short warm start in a fresh process with ``threads`` intra-op threads (imports not timed)."""
    out = subprocess.run([sys.executable, "-c", ONE_RUN, str(threads)], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def beside_a_busy_core(threads: int, env: dict[str, str]) -> float:
    """One timed warm start with ``threads`` threads while another process runs the same warm starts in a loop with
    as many threads (every process of the test command has the same setting; the scheduler shares the cores by
    thread, so a load with other settings would favour one side)."""
    loop = f"import subprocess, sys\nwhile True: subprocess.run([sys.executable, '-c', {ONE_RUN!r}, '{threads}'])"
    load = subprocess.Popen([sys.executable, "-c", loop], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(5)
        return warm_start_seconds(threads, env)
    finally:
        os.killpg(load.pid, signal.SIGKILL)  # the loop and the warm start it is running


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("OMP_NUM_THREADS", None)
    times: dict[int, list[float]] = {1: [], 2: []}
    for r in range(args.rounds):
        for threads in (2, 1):
            times[threads].append(beside_a_busy_core(threads, env))
        print(f"round {r + 1}: two threads {times[2][-1]:.1f} s, one thread {times[1][-1]:.1f} s", flush=True)
    two, one = statistics.median(times[2]), statistics.median(times[1])
    print(f"short warm start beside a busy core, median of {args.rounds}: two threads {two:.1f} s, one thread "
          f"{one:.1f} s; two / one = {two / one:.2f}")


if __name__ == "__main__":
    main()

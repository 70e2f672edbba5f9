"""GEM worker processes (``worker.py`` in GEM's own venv) and the JSON-lines client that talks to them.

GEM (``gem-llm`` 0.1.0) pins ``reasoning-gym==0.1.23`` and ``nltk==3.9.1``; the training environment keeps
reasoning-gym 0.1.25 for ``agentbridge-reasoning-gym``. So GEM lives in ``.venv-gem`` (``gem_env.sh`` makes it) and
its environments run in worker processes started from that venv; nothing here imports ``gem``. Workers are shared
by every episode of the process (one by default), started on first use, and stopped when the process exits. A
worker that dies fails the requests in flight with one line (its last stderr line), and the next request starts
a new one.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKER = HERE / "worker.py"
SCRIPT = HERE.parent / "gem_env.sh"  # plugins/gem/gem_env.sh


class GemError(RuntimeError):
    """The GEM worker could not be started, died, or refused a request."""


def gem_python(timeout_s: float = 1800.0) -> Path:
    """GEM's python: ``$AGENTBRIDGE_GEM_PYTHON`` when set, else ``.venv-gem`` made (when needed) by ``gem_env.sh``."""
    given = os.environ.get("AGENTBRIDGE_GEM_PYTHON")
    if given:
        return Path(given)
    try:
        done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GemError(f"{SCRIPT}: could not create GEM's venv ({type(e).__name__}: {e})") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise GemError(f"{SCRIPT}: could not create GEM's venv (exit {done.returncode}): {last}")
    return Path(done.stdout.strip().splitlines()[-1])


class Worker:
    """One worker process; ``request`` is thread-safe (one request at a time, in order)."""

    def __init__(self, python: Path, start_timeout_s: float = 120.0) -> None:
        self.python = python
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.log = tempfile.TemporaryFile()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            self.proc = subprocess.Popen([str(python), str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self.log, text=True, bufsize=1, env=env)
        except OSError as e:
            raise GemError(f"cannot start the GEM worker with {python}: {e}") from None
        first = self._read()
        if not first.get("ready"):
            raise GemError(f"the GEM worker ({python}) did not start: {first}")

    def _last_stderr(self) -> str:
        self.log.seek(0)
        lines = [ln for ln in self.log.read().decode(errors="replace").strip().splitlines() if ln.strip()]
        return lines[-1] if lines else "no output"

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            raise GemError(f"the GEM worker ({self.python}) exited {self.proc.returncode}: {self._last_stderr()}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request and wait for its reply; GemError when the worker refuses it or is gone."""
        with self.lock:
            rid = next(self.ids)
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write(json.dumps({"id": rid, "op": op, **fields}) + "\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                self.proc.wait()
                raise GemError(f"the GEM worker ({self.python}) exited {self.proc.returncode}: "
                               f"{self._last_stderr()}") from None
            reply = self._read()
        if reply.get("id") != rid:
            raise GemError(f"the GEM worker answered request {reply.get('id')} to request {rid}")
        if not reply.get("ok"):
            raise GemError(str(reply.get("error")))
        return reply

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.close()
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


class Pool:
    """``size`` workers of one GEM python; sessions are spread over them round robin."""

    def __init__(self, python: Path, size: int = 1) -> None:
        self.python, self.size = python, max(1, size)
        self.workers: list[Worker | None] = [None] * self.size
        self.turn = itertools.count()
        self.lock = threading.Lock()

    def worker(self) -> Worker:
        """The next worker, started (or restarted, if it died) when needed."""
        with self.lock:
            i = next(self.turn) % self.size
            current = self.workers[i]
            if current is None or not current.alive:
                current = self.workers[i] = Worker(self.python)
            return current

    def stop(self) -> None:
        with self.lock:
            for w in self.workers:
                if w is not None:
                    w.stop()
            self.workers = [None] * self.size


_POOLS: dict[tuple[str, int], Pool] = {}
_POOLS_LOCK = threading.Lock()
_DEFAULT_PYTHON: list[Path] = []


def pool(python: str | None = None, workers: int = 1) -> Pool:
    """The process's pool for ``python`` (default :func:`gem_python`, found once) with ``workers`` workers."""
    with _POOLS_LOCK:
        if not python and not _DEFAULT_PYTHON:
            _DEFAULT_PYTHON.append(gem_python())
        path = Path(python) if python else _DEFAULT_PYTHON[0]
        key = (str(path), workers)
        if key not in _POOLS:
            _POOLS[key] = Pool(path, workers)
        return _POOLS[key]


@atexit.register
def _stop_all() -> None:
    for p in list(_POOLS.values()):
        p.stop()

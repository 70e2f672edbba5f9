"""Starts the bundled OpenEnv server (``servers/guess_server.py``) from its own venv, ``.venv-openenv``, made by
``server_env.sh``; for tests, benchmarks and trying the bridge. Nothing here imports ``openenv``."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # plugins/openenv
SCRIPT = HERE / "server_env.sh"
SERVER = HERE / "servers" / "guess_server.py"


def server_python(timeout_s: float = 1800.0) -> Path:
    """The server venv's python, creating the venv first when needed (``server_env.sh``); RuntimeError with one
    line when it cannot be made."""
    try:
        done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"{SCRIPT}: could not create the OpenEnv server venv ({type(e).__name__}: {e})") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{SCRIPT}: could not create the OpenEnv server venv (exit {done.returncode}): {last}")
    return Path(done.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OpenEnvServer:
    """One server process of ``guess_server.py --kind KIND`` on a fixed port (so a restart keeps the URL)."""

    def __init__(self, python: Path, kind: str = "action", port: int | None = None) -> None:
        self.python, self.kind = python, kind
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tempfile.TemporaryFile()  # the server's stderr, read back when it fails to start

    def start(self, timeout_s: float = 60.0) -> OpenEnvServer:
        """Start the server and wait until ``/health`` answers; RuntimeError with one line if it does not."""
        self.proc = subprocess.Popen([str(self.python), str(SERVER), "--kind", self.kind, "--port", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                err = self.log.read().decode(errors="replace").strip()
                raise RuntimeError(f"OpenEnv server ({self.kind}) exited {self.proc.returncode} on start: "
                                   f"{(err.splitlines() or ['no output'])[-1]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1.0):  # noqa: S310 - local server
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"OpenEnv server ({self.kind}) did not answer {self.url}/health within {timeout_s:g}s")

    def kill(self) -> None:
        """Kill the process at once (SIGKILL), as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> OpenEnvServer:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":  # python -m agentbridge_openenv.server [action|mcp] [PORT]: serve until interrupted
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # so the server process is stopped with this one
    kind = sys.argv[1] if len(sys.argv) > 1 else "action"
    with OpenEnvServer(server_python(), kind, int(sys.argv[2]) if len(sys.argv) > 2 else None) as server:
        print(f"OpenEnv {kind} server at {server.url}", flush=True)
        try:
            assert server.proc is not None
            server.proc.wait()
        except KeyboardInterrupt:
            pass

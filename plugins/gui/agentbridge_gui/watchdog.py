"""Kills a process's browsers after it dies, even by SIGKILL: ``python -P watchdog.py PARENT_PID TOKEN ROOT``.

``BrowserPool`` starts one watchdog per process (``ensure_watchdog``) and launches every chromedriver with
``AGENTBRIDGE_GUI_OWNER=TOKEN`` in its environment and each chromium with a ``--user-data-dir`` under ``ROOT``
(a directory named after TOKEN). Chromium and its helpers inherit that environment and carry the directory on
their command line, so they stay recognisable after their parent is gone. The watchdog waits for EOF on its stdin
(the parent holds the other end) or for its parent pid to change (the parent died and it was re-parented), then
SIGKILLs every process of this user that carries TOKEN, and removes ROOT.

Not ``PR_SET_PDEATHSIG``: that signal fires when the *thread* that started the child exits (pool browsers are
started on executor threads that come and go), and chromium is started by chromedriver, out of our reach.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import psutil

OWNER_ENV = "AGENTBRIDGE_GUI_OWNER"
POLL_S = 0.25


class Watchdog:
    """This process's watchdog: the token its browsers carry and the root of their user-data dirs."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token or f"agentbridge-gui-{uuid.uuid4().hex[:16]}"
        self.root = Path(tempfile.gettempdir()) / self.token
        self.root.mkdir(mode=0o700, exist_ok=token is not None)
        self.parent_pid = os.getpid()
        # -P: the script's own directory stays off sys.path (its modules never shadow anything)
        self.process = subprocess.Popen(
            [sys.executable, "-P", str(Path(__file__).resolve()), str(self.parent_pid), self.token, str(self.root)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True, close_fds=True)

    def env(self) -> dict[str, str]:
        """Environment for a chromedriver (and, through it, chromium) that this watchdog must clean up."""
        return {**os.environ, OWNER_ENV: self.token}

    def user_data_dir(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.root))


_LOCK = threading.Lock()
_WATCHDOG: Watchdog | None = None


def ensure_watchdog() -> Watchdog:
    """The watchdog of this process, started on first use; a forked child gets its own, a dead one is replaced."""
    global _WATCHDOG
    with _LOCK:
        if _WATCHDOG is None or _WATCHDOG.parent_pid != os.getpid():
            _WATCHDOG = Watchdog()
        elif _WATCHDOG.process.poll() is not None:  # same token: the browsers it marked stay covered
            _WATCHDOG = Watchdog(_WATCHDOG.token)
        return _WATCHDOG


def owned_processes(token: str) -> list[psutil.Process]:
    """This user's processes (other than the caller) whose environment or command line carries ``token``."""
    me, uid = os.getpid(), os.getuid()
    found: list[psutil.Process] = []
    for p in psutil.process_iter(["uids", "cmdline"]):
        try:
            if p.pid == me or p.info["uids"] is None or p.info["uids"].real != uid:
                continue
            if token in " ".join(p.info["cmdline"] or ()):
                found.append(p)
                continue
            if p.environ().get(OWNER_ENV) == token:
                found.append(p)
        except psutil.Error:
            continue
    return found


def kill_owned(token: str, root: str | None = None) -> int:
    """SIGKILL every process carrying ``token`` (twice: a dying browser may still fork) and remove ``root``."""
    killed = 0
    for _ in range(2):
        procs = owned_processes(token)
        for p in procs:
            try:
                p.kill()
                killed += 1
            except psutil.Error:
                pass
        psutil.wait_procs(procs, timeout=3)
    if root:
        shutil.rmtree(root, ignore_errors=True)
    return killed


def main(argv: list[str]) -> int:
    parent, token, root = int(argv[0]), argv[1], argv[2]
    for sig in (signal.SIGINT, signal.SIGHUP):  # a terminal's Ctrl-C / hang-up is for the parent, not for us
        signal.signal(sig, signal.SIG_IGN)
    fd = sys.stdin.fileno()
    while os.getppid() == parent:
        ready, _, _ = select.select([fd], [], [], POLL_S)
        if ready and not os.read(fd, 4096):
            break  # EOF: the parent closed its end, i.e. it exited
    kill_owned(token, root)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

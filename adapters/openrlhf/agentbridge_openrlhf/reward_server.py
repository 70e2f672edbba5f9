"""OpenRLHF's own reward-model server (``openrlhf.cli.serve_rm``) for a spec's ``core/reward_model`` with
``serve: backend``.

In agent mode OpenRLHF's trainer runs no reward-model actors (``train_ppo_ray`` sets ``reward.remote_url`` to
"agent": the agent scores its own episodes); its way to serve a reward model beside the cluster is ``serve_rm``, a
``/get_reward`` HTTP server. The compiled ``launch.sh`` starts it over the reward's ``path`` before the trainer,
waits until it answers (:func:`wait_ready`), exports its address as ``AGENTBRIDGE_REWARD_MODEL_URL`` (which the
driver's ``core/reward_model`` calls, batching each step's episodes) and stops it when the job ends.
``submit.sh`` passes a server's address started on the cluster to the Job's workers.

Usage (from the scripts): ``python -m agentbridge_openrlhf.reward_server url PORT`` prints this host's address of
a server on PORT; ``... wait URL --pid PID --log FILE`` waits for it (exit 1 with the log's last lines if it dies).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from agentbridge.adapter.models import RewardModelArgs, backend_served
from agentbridge.spec import Spec

SERVER_MODULE = "openrlhf.cli.serve_rm"
DEFAULT_PORT = 18500


def served(spec: Spec) -> RewardModelArgs | None:
    """The reward model the job serves, or None (a spec has at most one ``core/reward_model``)."""
    models = backend_served(spec)
    return models[0] if models else None


def server_argv(args: RewardModelArgs, spec: Spec) -> list[str]:
    """``serve_rm``'s flags for ``args`` (the model path as ``@RM@``; ``--port`` is added at launch).

    ``--ds.param_dtype bf16`` and flash-attention 2 are serve_rm's defaults for a GPU (OpenRLHF's reward-model
    recipe); on a machine without GPUs the attention is ``eager`` (``resources.gpus_per_node: 0``)."""
    argv = ["--reward.model_name_or_path", "@RM@", "--host", "0.0.0.0", "--batch_size", str(args.batch_size),
            "--data.max_len", str(args.max_length)]
    if spec.resources.gpus_per_node == 0:
        argv += ["--ds.attn_implementation", "eager"]
    return argv


def this_host_url(port: int) -> str:
    """``http://<this host's address>:PORT/get_reward``: reachable from the cluster's other nodes."""
    try:
        host = socket.gethostbyname(socket.gethostname())
    except OSError:
        host = "127.0.0.1"
    return f"http://{host}:{port}/get_reward"


def wait_ready(url: str, *, pid: int | None = None, log: str | None = None, timeout_s: float = 900.0) -> None:
    """Return once the server at ``url`` scores a text; raise ``RuntimeError`` (with the log's tail) if its process
    ``pid`` exits first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    body = json.dumps({"query": ["ready?"]}).encode()
    while time.monotonic() < deadline:
        try:
            request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=10) as response:
                if isinstance(json.loads(response.read()).get("rewards"), list):
                    return
        except (OSError, ValueError):
            pass
        if pid is not None and not _alive(pid):
            raise RuntimeError(f"the reward-model server exited before answering at {url}{_tail(log)}")
        time.sleep(1.0)
    raise RuntimeError(f"the reward-model server did not answer at {url} within {timeout_s:g} s{_tail(log)}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a child that exited but was not reaped yet is a zombie: not serving
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


def _tail(log: str | None, lines: int = 5) -> str:
    if not log or not Path(log).is_file():
        return ""
    tail = Path(log).read_text(errors="replace").strip().splitlines()[-lines:]
    return "; its log ends: " + " | ".join(tail)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentbridge_openrlhf.reward_server")
    sub = parser.add_subparsers(dest="command", required=True)
    url = sub.add_parser("url", help="this host's /get_reward address for a server on PORT")
    url.add_argument("port", type=int)
    wait = sub.add_parser("wait", help="wait until the server at URL answers")
    wait.add_argument("url")
    wait.add_argument("--pid", type=int, default=None)
    wait.add_argument("--log", default=None)
    wait.add_argument("--timeout", type=float, default=900.0)
    args: Any = parser.parse_args(argv)
    if args.command == "url":
        print(this_host_url(args.port))
        return 0
    try:
        wait_ready(args.url, pid=args.pid, log=args.log, timeout_s=args.timeout)
    except RuntimeError as e:
        print(f"launch.sh: {e}", file=sys.stderr)
        return 1
    print(f"[reward model] OpenRLHF's serve_rm answers at {args.url}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

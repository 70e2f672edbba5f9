"""The GEM worker: runs GEM environments in GEM's own venv (``.venv-gem``) and answers JSON lines on stdin/stdout.

Started by :mod:`agentbridge_gem.client` as ``<gem python> worker.py``; imports only the standard library and
``gem`` (nothing of agentbridge, which is not installed there). One request per line, one reply per line::

    {"id": 1, "op": "make", "env_id": "game:GuessTheNumber-v0-easy", "kwargs": {}, "wrappers": []}
    {"id": 1, "ok": true, "session": "s1"}
    {"id": 2, "op": "reset", "session": "s1", "seed": 7}   -> {"obs": "...", "info": {...}}
    {"id": 3, "op": "step", "session": "s1", "action": "\\\\boxed{5}"}
        -> {"obs": "...", "reward": 0.0, "terminated": false, "truncated": false, "info": {...}}
    {"id": 4, "op": "expert", "session": "s1"}                -> {"action": "\\\\boxed{3}"}
    {"id": 5, "op": "close", "session": "s1"}                 -> {}
    {"id": 6, "op": "play", "env_id": ..., "seed": 7, "actions": [...], "repeat": 5}   (benchmarks: direct steps)

A request that fails answers ``{"id": n, "ok": false, "error": "Type: message"}``; the worker goes on.

GEM's environments draw from the global ``random`` and ``numpy.random`` state (``gem.utils.seeding.set_seed`` at
reset, and e.g. Game2048's new tile at each step). So that episodes interleaved in one worker play exactly as each
would alone, every session keeps its own copy of that state, swapped in when its call follows another session's.
Only tool wrappers (``python_tool``, ``search_tool``, ...) of GEM's ``WRAPPER_FACTORY`` are applied here; its
observation wrappers rewrite the history as text, which agentbridge's driver keeps as tokens instead.
"""

from __future__ import annotations

import difflib
import json
import os
import random
import sys
import time
import traceback
from typing import Any


def _plain(value: Any) -> Any:
    """``value`` as JSON: numpy scalars and arrays as numbers and lists, anything else unknown as its ``str``."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return _plain(tolist())
    return str(value)


class Session:
    """One env and its own copy of the global RNG state. The state is swapped only when another session ran in
    between (``Worker.owner``), so a session stepped again and again costs nothing extra."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.rng: Any = None  # None: the global state as it is when the session first runs


_owner: list[Session | None] = [None]  # the session whose RNG state the global generators hold now


def release() -> None:
    """Save the owning session's RNG state: the global generators are free for anything else."""
    import numpy as np

    current, _owner[0] = _owner[0], None
    if current is not None:
        current.rng = (random.getstate(), np.random.get_state())


def run(session: Session, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with the global ``random`` and ``numpy.random`` state of ``session``."""
    import numpy as np

    if _owner[0] is not session:
        release()
        if session.rng is not None:
            random.setstate(session.rng[0])
            np.random.set_state(session.rng[1])
        _owner[0] = session
    return fn(*args, **kwargs)


def expert(env: Any) -> str:
    """The next action of a scripted expert that knows the env's state: binary search on Guess The Number, the
    reference answer of a reasoning-gym question. ValueError for other envs."""
    base = env.unwrapped
    name = type(base).__name__
    if name == "GuessTheNumberEnv":
        low, high = base.min_number, base.max_number
        for g in base.previous_guesses:
            if g < base.game_number:
                low = max(low, g + 1)
            elif g > base.game_number:
                high = min(high, g - 1)
        return f"\\boxed{{{(low + high) // 2}}}"
    if name == "ReasoningGymEnv":
        return f"\\boxed{{{base.data['answer']}}}"
    raise ValueError(f"no scripted expert for GEM env {getattr(base, 'env_id', name)} ({name}); experts: "
                     "GuessTheNumber, rg:*")


class Worker:
    def __init__(self) -> None:
        import gem  # noqa: F401 - registers GEM's environments

        self.sessions: dict[str, Session] = {}
        self.count = 0

    def make(self, env_id: str, kwargs: dict[str, Any] | None = None, wrappers: list[str] | None = None) -> Any:
        import gem
        from gem.envs.registration import ENV_REGISTRY

        if env_id not in ENV_REGISTRY:
            close = difflib.get_close_matches(env_id, list(ENV_REGISTRY), n=4, cutoff=0.6)
            hint = f"did you mean: {', '.join(close)}" if close else f"{len(ENV_REGISTRY)} registered; " \
                "gem.print_envs() lists them"
            raise ValueError(f"no GEM env {env_id!r} ({hint})")
        env = gem.make(env_id, **(kwargs or {}))
        if wrappers:
            from gem.wrappers.wrapper_factory import WRAPPER_FACTORY

            for name in wrappers:
                if name not in WRAPPER_FACTORY:
                    raise ValueError(f"no GEM wrapper {name!r} (tool wrappers: "
                                     f"{', '.join(w for w in WRAPPER_FACTORY if 'tool' in w)})")
                if "tool" not in name:
                    raise ValueError(f"GEM wrapper {name!r} rewrites the observation history as text; agentbridge "
                                     "keeps the history as tokens itself: give only tool wrappers")
                env = WRAPPER_FACTORY[name](env)
        return env

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "make":
            release()  # GEM's envs may draw at construction (several reset in __init__): not from a session's state
            env = self.make(req["env_id"], req.get("kwargs"), req.get("wrappers"))
            self.count += 1
            sid = f"s{self.count}"
            self.sessions[sid] = Session(env)
            return {"session": sid}
        if op == "reset":
            s = self.sessions[req["session"]]
            obs, info = run(s, s.env.reset, seed=req.get("seed"))
            return {"obs": str(obs), "info": _plain(info)}
        if op == "step":
            s = self.sessions[req["session"]]
            obs, reward, terminated, truncated, info = run(s, s.env.step, req["action"])
            return {"obs": str(obs), "reward": float(reward), "terminated": bool(terminated),
                    "truncated": bool(truncated), "info": _plain(info)}
        if op == "expert":
            return {"action": expert(self.sessions[req["session"]].env)}
        if op == "close":
            gone = self.sessions.pop(req["session"], None)
            if gone is not None and _owner[0] is gone:
                _owner[0] = None
            if gone is not None and hasattr(gone.env, "close"):
                gone.env.close()
            return {}
        if op == "play":  # benchmarks: the same actions straight on a GEM env, each step timed
            release()
            env = self.make(req["env_id"], req.get("kwargs"), req.get("wrappers"))
            step_s: list[float] = []
            for _ in range(int(req.get("repeat", 1))):
                env.reset(seed=req.get("seed"))
                for action in req["actions"]:
                    t0 = time.perf_counter()
                    env.step(action)
                    step_s.append(time.perf_counter() - t0)
            return {"step_s": step_s}
        if op == "ping":
            return {"pid": os.getpid()}
        raise ValueError(f"unknown op {op!r}")


def main() -> int:
    # the protocol owns the real stdout; anything GEM prints (make_vec, get_wrapper_fns, tools) goes to stderr
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    worker = Worker()
    out.write(json.dumps({"id": 0, "ok": True, "ready": True}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        rid = None
        try:
            req = json.loads(line)
            rid = req.get("id")
            reply = {"id": rid, "ok": True, **worker.handle(req)}
        except Exception as e:  # noqa: BLE001 - one bad request must not end the worker
            if os.environ.get("AGENTBRIDGE_GEM_TRACE"):
                traceback.print_exc()
            reply = {"id": rid, "ok": False, "error": f"{type(e).__name__}: {e}".replace("\n", " ")}
        out.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""veRL's own reward-model serving for a spec's ``core/reward_model`` with ``serve: backend``.

The compiled config turns on veRL 0.9.1's reward model (``reward.reward_model``, see
``agentbridge_verl.config.reward_model_settings``): the trainer's ``RewardLoopManager`` starts vLLM servers over
``model_path`` on a GPU pool of their own, launches its reward router in front of them and hands the router's
address to each ``RewardLoopWorker`` it creates (the Ray actors ``reward_loop_worker_<i>``, whose handles the
``AgentLoopWorker`` receives). The agent loop itself receives neither, so :func:`connect` asks the first reward-loop
worker for its ``reward_router_address`` (Ray's ``__ray_call__``, once per process) and hands
``http://<router>/classify`` to the driver (``agentbridge.reward_model.use_backend_server``): the driver's
``core/reward_model`` then sends each step's episodes, in batches, through veRL's router to vLLM's ``/classify``,
with the model named as veRL's servers serve it (``model_path``). Without a reward loop to ask, each episode's
reward error says why.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentbridge.adapter.models import backend_served, use_backend_server
from agentbridge.spec.schema import Spec

WORKER = "reward_loop_worker_{}"  # RewardLoopManager._init_reward_loop_workers names its Ray actors so
ENDPOINT = "classify"  # vLLM's, as RewardLoopWorker.compute_score_disrm posts it
_CONNECTED: dict[str, str] = {}  # this process's reward router, once found


def router_address(worker: Any) -> Any:
    """The reward router's address a ``RewardLoopWorker`` was given (``host:port``); run in its actor."""
    return worker.reward_router_address


async def find_router() -> str:
    """The address of veRL's reward router, from the first reward-loop worker (``RuntimeError``: one line why)."""
    try:
        import ray

        handle = await asyncio.to_thread(ray.get_actor, WORKER.format(0))
        address = await handle.__ray_call__.remote(router_address)
    except Exception as e:  # noqa: BLE001 - no Ray, no such actor, a dead one: said in one line
        raise RuntimeError(f"no veRL reward-loop worker to ask for the reward router's address ({WORKER.format(0)}: "
                           f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''})") from e
    if not address:
        raise RuntimeError("veRL's reward loop runs no reward model (reward.reward_model.enable is false)")
    return str(address)


async def connect(trainer_config: Any, spec: Spec) -> None:
    """Point the driver's served reward models at veRL's reward router (once per process; a no-op when the spec
    serves none)."""
    if _CONNECTED or not backend_served(spec):
        return
    model = trainer_config.reward.reward_model.get("model_path")
    try:
        url = f"http://{await find_router()}/{ENDPOINT}"
    except RuntimeError as e:
        use_backend_server(None, problem=f"serve: backend on veRL: {e}")
        return
    use_backend_server(url, model=str(model) if model else None)
    _CONNECTED.update(url=url)


def disconnect() -> None:
    """Forget the router found (a new reward loop in this process is asked again)."""
    _CONNECTED.clear()
    use_backend_server(None)

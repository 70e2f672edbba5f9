"""Drive veRL's own ``AgentLoopWorker`` on CPU. The only stand-ins are for the vLLM server: ``HFServerStandIn``
(a tiny HF model) and ``ScriptedServer`` (scripted turns, fixed log-probs). The config, batch and worker helpers are
the package's (``agentbridge_verl.inprocess``), shared with the conformance suite."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from typing import Any

import torch

from agentbridge.env import Task
from agentbridge.hooks import hookimpl
from agentbridge.plugins import get_plugins
from agentbridge.trajectory import Trajectory
from agentbridge_verl.inprocess import (  # noqa: F401 - re-exported for the tests
    compose_worker_config,
    generate,
    input_batch,
    unpadded_rows,
)

Script = Callable[[str, str], str]  # (request_id, conversation text so far) -> next assistant text


class HFServerStandIn:
    """Stand-in for veRL's ``LLMServerClient`` (the vLLM server): same ``generate`` signature, a tiny HF model.

    Samples from the model, or, given ``script``, plays scripted turns; either way the log-probs are the model's.
    """

    def __init__(self, model: Any, tokenizer: Any, script: Script | None = None) -> None:
        self.model, self.tokenizer, self.script = model, tokenizer, script
        self.requests: list[tuple[str, int, dict[str, Any]]] = []

    def _logprobs(self, prompt_ids: list[int], ids: list[int]) -> list[float]:
        with torch.no_grad():
            logits = self.model(torch.tensor([prompt_ids + ids])).logits[0, len(prompt_ids) - 1:-1].float()
        return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0].tolist()

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       image_data: list[Any] | None = None, video_data: Any = None, audio_data: Any = None,
                       mm_processor_kwargs: Any = None, **kwargs: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        self.requests.append((request_id, len(prompt_ids), dict(sampling_params)))
        budget = int(sampling_params["max_tokens"])
        eos = self.tokenizer.eos_token_id
        if self.script is not None:
            text = self.script(request_id, self.tokenizer.decode(prompt_ids))
            ids = (self.tokenizer.encode(text, add_special_tokens=False) + [eos])[:budget]
        else:
            inp = torch.tensor([prompt_ids])
            with torch.no_grad():
                out = self.model.generate(inp, attention_mask=torch.ones_like(inp), max_new_tokens=budget,
                                          do_sample=True, temperature=float(sampling_params["temperature"]) or 1.0,
                                          top_k=0, top_p=1.0, eos_token_id=eos, pad_token_id=eos)
            ids = out[0, inp.shape[1]:].tolist()
            ids = ids[: ids.index(eos) + 1] if eos in ids else ids
        return TokenOutput(token_ids=ids, log_probs=self._logprobs(list(prompt_ids), ids), stop_reason="completed")


def fixed_logprob(token: int, position: int) -> float:
    """A scripted server's log-prob of a token at a position in its turn: fixed, distinct, in (-1, 0)."""
    return -((token * 7 + position * 13) % 97 + 1) / 100.0


class ScriptedServer:
    """The thinnest stand-in for veRL's ``LLMServerClient``: scripted turns, fixed log-probs, no model.

    Records every request: id, prompt ids, the images veRL would send to vLLM (``image_data``), sampling params.
    """

    def __init__(self, tokenizer: Any, script: Script) -> None:
        self.tokenizer, self.script = tokenizer, script
        self.requests: list[dict[str, Any]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       image_data: list[Any] | None = None, video_data: Any = None, audio_data: Any = None,
                       mm_processor_kwargs: Any = None, **kwargs: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        self.requests.append({"request_id": request_id, "prompt_ids": list(prompt_ids),
                              "image_data": list(image_data or []), "sampling_params": dict(sampling_params)})
        text = self.script(request_id, self.tokenizer.decode(prompt_ids))
        ids = (self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id])
        ids = ids[: int(sampling_params["max_tokens"])]
        return TokenOutput(token_ids=ids, log_probs=[fixed_logprob(t, i) for i, t in enumerate(ids)],
                           stop_reason="completed")


def calculator_script(tasks: list[Task]) -> Script:
    """The calculator expert's turns; every second episode of a task answers wrong (so groups have spread)."""
    seen: dict[str, list[str]] = {}

    def play(request_id: str, text: str) -> str:
        task = next(t for t in tasks if t.prompt in text)
        episodes = seen.setdefault(task.id, [])
        if request_id not in episodes:
            episodes.append(request_id)
        results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text, re.S)
        steps = task.data["steps"]
        if len(results) < len(steps):
            expression = steps[len(results)].format(prev=results[-1] if results else "")
            call = json.dumps({"name": "calculator", "arguments": {"expression": expression}})
            return f"<tool_call>\n{call}\n</tool_call>"
        wrong = episodes.index(request_id) % 2 == 1
        return f"<answer>{int(task.data['answer']) + 1 if wrong else task.data['answer']}</answer>"

    return play


class TrajectoryRecorder:
    """An agentbridge plugin that keeps every trajectory the driver finishes (``on_episode_end``)."""

    def __init__(self) -> None:
        self.trajectories: list[Trajectory] = []

    @hookimpl
    def on_episode_end(self, trajectory: Trajectory) -> None:
        self.trajectories.append(trajectory)


def record_trajectories() -> TrajectoryRecorder:
    recorder = TrajectoryRecorder()
    get_plugins().pm.register(recorder, name=f"test-recorder-{uuid.uuid4().hex[:6]}")
    return recorder


def capture_outputs(monkeypatch: Any) -> list[Any]:
    """Every ``AgentLoopOutput`` the worker post-processes from now on (what the agent loop handed veRL)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    outputs: list[Any] = []
    original = AgentLoopWorker._agent_loop_postprocess

    async def record(self: Any, output: Any, *args: Any, **kwargs: Any) -> Any:
        outputs.append(output)
        return await original(self, output, *args, **kwargs)

    monkeypatch.setattr(AgentLoopWorker, "_agent_loop_postprocess", record)
    return outputs


def use_verl_processor(monkeypatch: Any) -> None:
    """Give veRL's model config the processor ``hf_processor`` builds where torchvision loads (see processor.py)."""
    import verl.workers.config.model as model_config

    from agentbridge_verl.processor import verl_processor

    monkeypatch.setattr(model_config, "hf_processor", lambda path, **_: verl_processor(str(path))[0])

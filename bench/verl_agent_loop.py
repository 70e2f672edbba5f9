"""Per-turn CPU overhead: agentbridge's veRL agent loop (A) vs veRL 0.9.1's built-in ToolAgentLoop (B).

Both loops run the same scripted calculator episodes (``turns - 1`` hermes tool calls, then an answer) with the
real Qwen2.5 tokenizer (``builtin:tiny-qwen2.5``) against an instant in-process server that returns pre-tokenized
turns, so only the loops' own work is timed: rendering, tool-call parsing, the tool, token bookkeeping and
building the AgentLoopOutput. Each episode includes constructing the loop, as veRL's worker does per sample.
A and B are interleaved in one run; times are process CPU time (other jobs disturb it less than wall time).
Run in the veRL environment:

    .venv-verl/bin/python bench/verl_agent_loop.py [--repeats 7] [--episodes 8] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import verl
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from agentbridge.env import Task
from agentbridge.models import load_tokenizer, resolve_model_path
from agentbridge.tools import as_tool
from agentbridge_math.calculator import calculator, evaluate
from agentbridge_verl.data import TASK_KEY
from agentbridge_verl.rollout import AgentBridgeAgentLoop

LENGTHS = (2, 8, 32)
MODEL = "builtin:tiny-qwen2.5"
SYSTEM = "Solve the arithmetic problem. Call the calculator for every step, then give the final number."
TASK = Task(id="bench-0", prompt="Add 1 to 2, again and again.", data={"answer": "3", "steps": ["1 + 2"]})
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


class CalculatorTool(BaseTool):
    """veRL tool running agentbridge's calculator, so both loops execute the same tool code."""

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
                      ) -> tuple[ToolResponse, float, dict]:
        return ToolResponse(text=evaluate(str(parameters.get("expression", "")))), 0.0, {}


class InstantServer:
    """Stand-in for the vLLM server: returns the next pre-tokenized scripted turn of each request id at once."""

    def __init__(self, turns: list[list[int]]) -> None:
        self.turns, self.seen = turns, {}

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:
        n = self.seen.get(request_id, 0)
        self.seen[request_id] = n + 1
        ids = self.turns[min(n, len(self.turns) - 1)]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed")


def scripted_turns(tok: Any, turns: int) -> list[list[int]]:
    calls = [json.dumps({"name": "calculator", "arguments": {"expression": f"{k} + 2"}}) for k in range(turns - 1)]
    texts = [f"<tool_call>\n{c}\n</tool_call>" for c in calls] + ["<answer>3</answer>"]
    return [list(tok.encode(t, add_special_tokens=False)) + [tok.eos_token_id] for t in texts]


def write_spec(directory: Path, turns: int) -> Path:
    spec = yaml.safe_load(Path("examples/calculator.yaml").read_text())
    spec["model"]["path"] = MODEL
    spec["agent"].update(system_prompt=SYSTEM, max_turns=turns, max_prompt_tokens=2048, max_response_tokens=8192,
                         max_tokens_per_turn=256)
    path = directory / f"spec-{turns}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def trainer_config(model_dir: Path, turns: int) -> Any:
    cfg_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=[
            f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.prompt_length=2048", "actor_rollout_ref.rollout.response_length=8192",
            "actor_rollout_ref.rollout.multi_turn.format=hermes",
            f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={turns}"])
    OmegaConf.resolve(cfg)
    return cfg


def tool() -> CalculatorTool:
    """veRL's view of agentbridge's calculator: the very schema agentbridge renders into the prompt."""
    schema = as_tool(calculator).schema()
    return CalculatorTool(config={"type": "native"}, tool_schema=OpenAIFunctionToolSchema.model_validate(schema))


async def episodes(kind: str, cfg: Any, tok: Any, spec: Path, script: list[list[int]], n: int,
                   tools: list[BaseTool]) -> tuple[float, Any]:
    """CPU seconds for ``n`` sequential episodes of loop ``kind`` ('A' agentbridge, 'B' ToolAgentLoop)."""
    server = InstantServer(script)
    common = dict(trainer_config=DictConfigWrap(cfg), server_manager=server, tokenizer=tok, processor=None,
                  dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data), hf_model_type="qwen2")
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK.prompt}]
    out = None
    t0 = time.process_time()
    for _ in range(n):
        if kind == "A":
            loop = AgentBridgeAgentLoop(**common, spec_path=str(spec), tools=ToolListWrap([]))
            out = await loop.run(dict(SAMPLING), raw_prompt=messages,
                                 extra_info={TASK_KEY: json.dumps(TASK.to_dict())})
        else:
            loop = ToolAgentLoop(**common, tools=ToolListWrap(tools))  # tools load once per worker
            out = await loop.run(dict(SAMPLING), raw_prompt=messages, tools_kwargs={}, extra_info={})
    return time.process_time() - t0, out


async def main(repeats: int, n: int, lengths: tuple[int, ...]) -> None:
    logging.getLogger("verl").setLevel(logging.WARNING)
    tok = load_tokenizer(MODEL)
    model_dir = resolve_model_path(MODEL)
    rows = []
    with contextlib.redirect_stdout(io.StringIO()):  # veRL's BaseTool prints its schema when built
        tools: list[BaseTool] = [tool()]
    with tempfile.TemporaryDirectory() as tmp:
        for turns in lengths:
            cfg, spec, script = trainer_config(model_dir, turns), write_spec(Path(tmp), turns), scripted_turns(tok,
                                                                                                            turns)
            await episodes("A", cfg, tok, spec, script, 1, tools)  # warm caches (Agent, templates) for both
            await episodes("B", cfg, tok, spec, script, 1, tools)
            times: dict[str, list[float]] = {"A": [], "B": []}
            outs: dict[str, Any] = {}
            for _ in range(repeats):
                for kind in ("A", "B"):
                    seconds, outs[kind] = await episodes(kind, cfg, tok, spec, script, n, tools)
                    times[kind].append(seconds / n / turns)
            a, b = statistics.median(times["A"]), statistics.median(times["B"])
            same = (outs["A"].prompt_ids + outs["A"].response_ids == outs["B"].prompt_ids + outs["B"].response_ids
                    and outs["A"].response_mask == outs["B"].response_mask)
            rows.append((turns, a, b, len(outs["A"].prompt_ids) + len(outs["A"].response_ids),
                         len(outs["B"].prompt_ids) + len(outs["B"].response_ids), same))
    print(f"repeats={repeats} episodes/repeat={n}; median CPU µs per turn (episode incl. loop construction)")
    print("| turns | A agentbridge µs/turn | B ToolAgentLoop µs/turn | A/B | tokens A | tokens B | same ids+mask |")
    print("|------:|----------------------:|------------------------:|----:|---------:|---------:|:-------------:|")
    for turns, a, b, ta, tb, same in rows:
        print(f"| {turns:5d} | {a * 1e6:21.0f} | {b * 1e6:23.0f} | {a / b:.2f} | {ta:8d} | {tb:8d} | "
              f"{'yes' if same else 'no':^13} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="2 repeats x 2 episodes (smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.episodes = 2, 2
    asyncio.run(main(args.repeats, args.episodes, LENGTHS))

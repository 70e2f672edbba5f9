"""Golden episodes: a fixed environment, fixed tasks and a fixed generator every backend is checked against.

The golden generator (:func:`golden_turn`) is the one stand-in a conformance run uses for a backend's inference
engine (vLLM in veRL and OpenRLHF, TRL's generator): from the prompt ids alone it finds the case and the turn and
returns fixed tokens with fixed log-probs, cut to the requested budget as an engine would. Everything else is
agentbridge's driver and the backend's own code.

Cases (``CASES``): tool calls and a right answer; an unknown tool, bad arguments and a wrong answer; a malformed
tool call; a turn cut by the token budget; an episode whose environment fails before the first token (the
empty-episode fallback: one EOS with loss mask 0); a reward function that raises; an episode ended by
``max_turns``; and, for a vision-language model, an image in the prompt plus a
screenshot returned by a tool.

Kinds (``KINDS``): ``text`` and ``vlm``, each backend's job compiled from the golden spec as a user's would be;
``lengths``, the text cases under a job whose own sequence lengths (:data:`BACKEND_LENGTHS`, set in each backend's
own way) are below the spec's budgets: every backend must cut the episodes by the one budget rule
(:func:`agentbridge.rollout.agent_edge.fit_limits`), the one the driver's reference applies; and ``credit``, the
text cases with turn-level credit (:data:`KIND_SETS`: ``algorithm.credit: turn`` and a per-turn reward paying each
tool-calling turn): each backend's training batch must hold every turn's process reward on the turn's last token
where it takes per-token rewards (``Capabilities.turn_credit``), and the episode's sum on its last token where not.

The golden environment, tools, dataset and reward are a plugin that is not registered by default:
:func:`enable_golden` (called by :func:`agentbridge.conformance.golden_spec` and the suite) opts a process in.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from importlib import resources
from typing import Any

from agentbridge.env import Message, Task
from agentbridge.hooks import hookimpl
from agentbridge.plugins import enable_plugin
from agentbridge.tools import ToolEnvironment
from agentbridge.trajectory import Generation, SamplingParams

TEXT, VLM, LENGTHS, CREDIT = "text", "vlm", "lengths", "credit"
KINDS = (TEXT, VLM, LENGTHS, CREDIT)
# the overrides that make a kind's golden spec from its file (the lengths and credit kinds use the text spec)
KIND_SETS: dict[str, list[str]] = {CREDIT: [
    "algorithm.credit=turn",
    "reward=[{id: core/exact_answer, weight: 1.0}, {id: core/format, weight: 0.1}, "
    "{id: conformance/fragile, weight: 0.5}, {id: conformance/tool_turn, weight: 0.5, per: turn}]"]}
# The lengths kind: each backend's job keeps at most this many prompt and response tokens (prompt + response for a
# backend with one length), set with the backend's own settings; the golden spec's budgets are 512 and 256.
BACKEND_LENGTHS = {"max_prompt": 512, "max_response": 96}
_MARKER = re.compile(r"\[golden:([a-z_]+)\]")


def _call(name: str, arguments: dict[str, Any] | str) -> str:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


LONG_TURN = " ".join(str(i) for i in range(1, 400))  # longer than any per-turn budget: the engine cuts it

# case -> (kind, prompt, gold answer, assistant turns); a turn ending in EOS unless it is LONG_TURN
CASES: dict[str, tuple[str, str, str, list[str]]] = {
    "tools": (TEXT, "Add 2 and 3, then add 4 to the result.", "9",
              [_call("golden_add", {"a": 2, "b": 3}), _call("golden_add", {"a": 5, "b": 4}), "<answer>9</answer>"]),
    "tool_error": (TEXT, "What is 6 divided by 3?", "2",
                   [_call("golden_divide", {"a": 6, "b": 3}), _call("golden_add", {"a": "six", "b": 3}),
                    "<answer>3</answer>"]),
    "parse_error": (TEXT, "Add 1 and 1.", "2",
                    [_call("golden_add", '{"a": 1, "b": 1,'), "<answer>2</answer>"]),
    "truncation": (TEXT, "Count to four hundred.", "399",
                   [_call("golden_add", {"a": 1, "b": 1}), LONG_TURN]),
    "early_error": (TEXT, "Add 7 and 8.", "15", ["<answer>15</answer>"]),
    "reward_error": (TEXT, "Add 3 and 3.", "6", [_call("golden_add", {"a": 3, "b": 3}), "<answer>6</answer>"]),
    "max_turns": (TEXT, "Keep adding one.", "5",
                  [_call("golden_add", {"a": k, "b": 1}) for k in range(1, 6)] + ["<answer>5</answer>"]),
    "image": (VLM, "What colour is the square? Look again first.", "red",
              [_call("golden_look", {}), "<answer>red</answer>"]),
}


# cases whose episode fails on purpose: the environment's reset raises (before the first token), or a reward raises
FAILURES: dict[str, str] = {"early_error": "reset", "reward_error": "reward"}


def cases(kind: str) -> list[str]:
    """The case names of one kind, in a fixed order (the ``lengths`` kind runs the text cases)."""
    episodes = TEXT if kind in (LENGTHS, CREDIT) else kind
    return [name for name, (k, *_) in CASES.items() if k == episodes]


def golden_tasks(split: str = TEXT, size: int = 100, seed: int = 0, **_: Any) -> list[Task]:
    """The golden tasks of one kind of episodes (the dataset ``conformance/golden``; ``split`` is ``text`` or
    ``vlm``)."""
    if split not in (TEXT, VLM):
        raise ValueError(f"conformance/golden: split must be one of {TEXT}, {VLM}, not '{split}'")
    tasks = [Task(id=name, prompt=f"[golden:{name}] {CASES[name][1]}",
                  data={"answer": CASES[name][2], "image": CASES[name][0] == VLM,
                        **({"fail": FAILURES[name]} if name in FAILURES else {})})
             for name in cases(split)]
    return tasks[:size]


def square(colour: str, size: tuple[int, int]) -> Any:
    """A white image with a coloured square: the golden screenshots (deterministic pixels)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", size, "white")
    ImageDraw.Draw(img).rectangle([8, 8, size[0] - 9, size[1] - 9], fill=colour)
    return img


def golden_add(a: int, b: int) -> str:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return str(a + b)


def golden_look() -> list[dict[str, Any]]:
    """Take a screenshot of the screen."""
    return [{"type": "image", "image": square("red", (84, 56))}, {"type": "text", "text": "screenshot taken"}]


class GoldenEnv(ToolEnvironment):
    """The golden environment: ``golden_add`` and ``golden_look``; VLM tasks start with a screenshot.

    The final answer step pays a process reward of 0.25 when the answer is right, so the process component
    travels through every backend too.
    """

    async def reset(self, task: Task) -> list[Message]:
        if task.data.get("fail") == "reset":
            raise ConnectionError("golden environment: reset failed on purpose (case early_error)")
        if task.data.get("image"):
            task.images = [square("red", (56, 56))]
        return await super().reset(task)

    async def final_reward(self, action: Message) -> float:
        text = str(action.get("content") or "")
        return 0.25 if self.task is not None and f"<answer>{self.task.data['answer']}</answer>" in text else 0.0


def fragile_reward(trajectory: Any, task: Task) -> float:
    """The golden reward that raises for the ``reward_error`` case (1 otherwise): a broken reward function."""
    if task.data.get("fail") == "reward":
        raise RuntimeError("golden reward: raised on purpose (case reward_error)")
    return 1.0


def tool_turn_reward(trajectory: Any, task: Task) -> float:
    """The golden per-turn reward (``per: turn``): 1 for a turn that called a tool, 0 otherwise."""
    return float(bool(trajectory.turns and trajectory.turns[-1].tool_calls))


def logprob(token: int, position: int) -> float:
    """The golden log-prob of a token at a position within its turn: fixed, distinct, in (-1, 0)."""
    return -((token * 7 + position * 13) % 97 + 1) / 100.0


def golden_turn(tokenizer: Any, prompt_ids: list[int], max_tokens: int) -> tuple[list[int], list[float]]:
    """The golden generator: the next assistant turn for ``prompt_ids`` (ids and log-probs), cut to ``max_tokens``.

    The case is the ``[golden:NAME]`` marker in the prompt; the turn is the number of assistant turns before it.
    """
    text = tokenizer.decode(prompt_ids)
    found = _MARKER.search(text)
    if found is None or found.group(1) not in CASES:
        raise ValueError("golden generator: the prompt carries no [golden:CASE] marker")
    turns = CASES[found.group(1)][3]
    done = text.count("<|im_start|>assistant") - 1
    turn = turns[min(done, len(turns) - 1)]
    ids = list(tokenizer.encode(turn, add_special_tokens=False))
    if turn is not LONG_TURN:
        ids.append(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    ids = ids[:max_tokens]
    return ids, [logprob(t, i) for i, t in enumerate(ids)]


def golden_reply(tokenizer: Any, prompt_ids: Any, max_tokens: int) -> tuple[list[int], list[float], str]:
    """The golden turn as an engine replies (what a backend's stand-in engine answers): its ids, log-probs and
    finish reason, ``stop`` for a turn that ends in ``<|im_end|>`` and ``length`` for one the budget cut."""
    ids, logprobs = golden_turn(tokenizer, [int(t) for t in prompt_ids], max_tokens)
    return ids, logprobs, "stop" if ids and ids[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>") else "length"


class GoldenPolicy:
    """The golden generator as an agentbridge ``Policy`` (what the driver alone runs for the reference)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams,
                       images: list[Any] | None = None) -> Generation:
        ids, lps, finish = golden_reply(self.tokenizer, prompt_ids, sampling.max_tokens)
        return Generation(token_ids=ids, logprobs=lps, finish_reason=finish)


def golden_spec_path(kind: str) -> Any:
    """The golden spec file of one kind (a ``Traversable`` inside the agentbridge package; the ``lengths`` and
    ``credit`` kinds use the text spec, the latter with :data:`KIND_SETS`)."""
    if kind not in KINDS:
        raise ValueError(f"conformance kind must be one of {', '.join(KINDS)}, not '{kind}'")
    return resources.files("agentbridge.conformance") / f"golden_{TEXT if kind in (LENGTHS, CREDIT) else kind}.yaml"


_ENABLING = threading.Lock()


def enable_golden() -> None:
    """Register the golden fixtures in this process's plugins and in those of the processes it starts (once, also
    when the suites of several backends start at the same time in threads of one process)."""
    with _ENABLING:
        enable_plugin(__name__)


@hookimpl
def register_environments(register: Callable[[str, Any], None]) -> None:
    register("conformance/golden", GoldenEnv)


@hookimpl
def register_tools(register: Callable[[Any], None]) -> None:
    register(golden_add)
    register(golden_look)


@hookimpl
def register_rewards(register: Callable[[str, Any], None]) -> None:
    register("conformance/fragile", fragile_reward)
    register("conformance/tool_turn", tool_turn_reward)


@hookimpl
def register_datasets(register: Callable[[str, Any], None]) -> None:
    register("conformance/golden", golden_tasks)

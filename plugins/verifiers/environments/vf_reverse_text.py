"""reverse-text, the classic verifiers example, as a verifiers 0.4.0 taskset: one answer per task, scored by two
weighted rewards over the boxed answer (``vf.extract_boxed_answer``, verifiers' own answer extraction) and one
metric. Offline: the words are made here, no dataset hub."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf

SYSTEM_PROMPT = "Reverse the text character by character. Put your final answer in \\boxed{}."
LETTERS = "abcdefghijklmnopqrstuvwxyz"


class ReverseData(vf.TaskData):
    answer: str


class ReverseTask(vf.Task[ReverseData]):
    @vf.reward(weight=1.0)
    async def correct(self, task: ReverseData, trace: vf.Trace) -> float:
        return float(vf.extract_boxed_answer(trace.last_reply, strict=True) == task.answer)

    @vf.reward(weight=0.2)
    async def boxed(self, trace: vf.Trace) -> float:
        return float(vf.extract_boxed_answer(trace.last_reply, strict=True) != "")

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class ReverseConfig(vf.TasksetConfig):
    num_tasks: int = 200
    min_len: int = 3
    max_len: int = 8


class ReverseTaskset(vf.Taskset[ReverseTask, ReverseConfig]):
    def load(self) -> Iterator[ReverseTask]:
        rng = random.Random(0)
        for i in range(self.config.num_tasks):
            word = "".join(rng.choice(LETTERS) for _ in range(rng.randint(self.config.min_len, self.config.max_len)))
            yield ReverseTask(ReverseData(id=f"reverse-{i}", prompt=word, system_prompt=SYSTEM_PROMPT,
                                          answer=word[::-1]), self.config.task)


def expert(task: dict[str, Any], messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """The right answer, boxed (the bridge's scripted policy plays it)."""
    return f"\\boxed{{{task['answer']}}}"


__all__ = ["ReverseTaskset"]

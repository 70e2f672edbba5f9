"""A tool-using verifiers 0.4.0 taskset: arithmetic with a calculator toolset (an MCP server verifiers starts once
for the taskset and shares across rollouts), two weighted rewards (the boxed answer, tools used) and a metric.
No ``from __future__ import annotations`` here: MCP reads the tools' annotations as objects."""

import json
import random
from collections.abc import Iterator
from typing import Annotated, Any

import verifiers.v1 as vf
from pydantic import Field

Int = Annotated[int, Field(description="an integer")]

SYSTEM_PROMPT = ("Compute the expression with the calculator tools, one operation per call. Put the final number in "
                 "\\boxed{}.")


class CalculatorConfig(vf.SharedToolsetConfig):
    pass


class Calculator(vf.Toolset[CalculatorConfig]):
    @vf.tool
    async def add(self, a: Int, b: Int) -> int:
        """Add two integers."""
        return a + b

    @vf.tool
    async def multiply(self, a: Int, b: Int) -> int:
        """Multiply two integers."""
        return a * b


class CalcData(vf.TaskData):
    a: int
    b: int
    c: int
    answer: int


class CalcTask(vf.Task[CalcData]):
    @vf.reward(weight=1.0)
    async def correct(self, task: CalcData, trace: vf.Trace) -> float:
        return float(vf.extract_boxed_answer(trace.last_reply, strict=True).strip() == str(task.answer))

    @vf.reward(weight=0.25)
    async def used_tools(self, trace: vf.Trace) -> float:
        return float(len(trace.tool_messages) >= 2)

    @vf.metric
    async def tool_calls(self, trace: vf.Trace) -> float:
        return float(len(trace.tool_messages))


class CalcTasksetConfig(vf.TasksetConfig):
    num_tasks: int = 200


class CalcTaskset(vf.Taskset[CalcTask, CalcTasksetConfig]):
    def load(self) -> Iterator[CalcTask]:
        rng = random.Random(1)
        for i in range(self.config.num_tasks):
            a, b, c = rng.randint(1, 20), rng.randint(1, 20), rng.randint(2, 9)
            yield CalcTask(CalcData(id=f"calc-{i}", prompt=f"What is ({a} + {b}) * {c}?", system_prompt=SYSTEM_PROMPT,
                                    a=a, b=b, c=c, answer=(a + b) * c), self.config.task)

    @classmethod
    def toolsets(cls, config: CalcTasksetConfig) -> list[vf.Toolset]:
        return [Calculator(CalculatorConfig())]


def expert(task: dict[str, Any], messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """add, then multiply, then the boxed result."""
    results = [m["content"] for m in messages if m.get("role") == "tool"]
    names = {t["function"]["name"].rsplit("_", 1)[-1]: t["function"]["name"] for t in tools}
    if not results:
        return {"content": "", "tool_calls": [{"name": names["add"], "arguments": {"a": task["a"], "b": task["b"]}}]}
    if len(results) == 1:
        total = int(json.loads(results[0])) if results[0].strip().lstrip("-").isdigit() else task["a"] + task["b"]
        return {"content": "", "tool_calls": [{"name": names["multiply"], "arguments": {"a": total, "b": task["c"]}}]}
    return {"content": f"\\boxed{{{results[-1].strip()}}}"}


__all__ = ["CalcTaskset"]

if __name__ == "__main__":  # verifiers starts each toolset's MCP server as `python -m <its module>`
    Calculator.run()

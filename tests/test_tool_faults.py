"""Tool faults: a hung sync tool cannot starve the others, arguments are validated and coerced from the
signature (one line to the model when they do not fit), and a rollout says so when too many tool calls fail."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Literal

import pytest

from agentbridge.env import Message, Task, ToolCall
from agentbridge.tools import ToolEnvironment, tool

RELEASE = threading.Event()


@tool(timeout_s=0.5)
def hang() -> str:
    """Block until released."""
    RELEASE.wait(30)
    return "late"


@tool(timeout_s=0.5)
def quick(x: int) -> int:
    """Add one."""
    return x + 1


@tool
def pick(n: int, tags: list[int] | None = None, label: str = "x", ratio: float = 1.0,
         mode: Literal["a", "b"] = "a") -> str:
    """Echo the arguments as JSON."""
    return json.dumps({"n": n, "tags": tags, "label": label, "ratio": ratio, "mode": mode})


def call(name: str, arguments: Any) -> ToolCall:
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_hung_sync_tool_does_not_starve_fast_tools() -> None:
    """More hung calls than any default thread pool has workers: the fast tool still answers at once."""

    async def main() -> tuple[list[tuple[Message, bool]], list[tuple[Message, bool]], float, tuple[Message, bool]]:
        env = ToolEnvironment([hang, quick])
        await env.reset(Task("t", "q"))
        try:
            hung = await asyncio.gather(*(env.call(call("hang", {})) for _ in range(40)))
            started = time.monotonic()
            fast = await asyncio.gather(*(env.call(call("quick", {"x": i})) for i in range(8)))
            elapsed = time.monotonic() - started
        finally:
            RELEASE.set()
        await asyncio.sleep(0.05)
        return hung, fast, elapsed, await env.call(call("hang", {}))

    hung, fast, elapsed, after = asyncio.run(main())
    assert [(m["content"], ok) for m, ok in fast] == [(str(i + 1), True) for i in range(8)]
    assert elapsed < 0.4
    assert not any(ok for _, ok in hung)
    texts = [m["content"] for m, _ in hung]
    assert all(t.startswith("Error: tool 'hang' timed out after 0.5s") and "\n" not in t for t in texts)
    assert sum("waiting for one of its 8 workers" in t for t in texts) == 32  # queued behind the 8 hung ones
    assert after == ({"role": "tool", "tool_call_id": "c", "name": "hang", "content": "late"}, True)


def test_hung_tool_does_not_block_exit(tmp_path: Path) -> None:
    script = tmp_path / "hung.py"
    script.write_text(textwrap.dedent('''
        import asyncio, threading
        from agentbridge.env import Task
        from agentbridge.tools import ToolEnvironment, tool

        never = threading.Event()

        @tool(timeout_s=0.2)
        def stuck() -> str:
            """Never returns."""
            never.wait()
            return "never"

        async def main():
            env = ToolEnvironment([stuck])
            await env.reset(Task("t", "q"))
            msg, ok = await env.call({"id": "c", "type": "function", "function": {"name": "stuck", "arguments": {}}})
            print(ok, msg["content"])

        asyncio.run(main())
    '''))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "False Error: tool 'stuck' timed out after 0.2s.", res.stderr


@pytest.mark.parametrize("arguments, expected", [
    ({"n": "7"}, {"n": 7}),
    ({"n": 7.0, "ratio": "0.5"}, {"n": 7, "ratio": 0.5}),
    ({"n": 7, "tags": None}, {"n": 7, "tags": None}),
    ({"n": 7, "label": None}, {"n": 7, "label": "x"}),  # null for an argument with a default: the default
    ({"n": 7, "tags": ["3", 4]}, {"n": 7, "tags": [3, 4]}),
    ({"n": 7, "mode": "b"}, {"n": 7, "mode": "b"}),
])
def test_arguments_coerced_from_signature(arguments: dict[str, Any], expected: dict[str, Any]) -> None:
    env = ToolEnvironment([pick])
    msg, ok = asyncio.run(env.call(call("pick", arguments)))
    assert ok, msg["content"]
    got = json.loads(msg["content"])
    assert {k: got[k] for k in expected} == expected


@pytest.mark.parametrize("arguments, problem", [
    ({"n": 7, "tags": ["a"]}, "argument 'tags[0]': Input should be a valid integer"),
    ({"n": "seven"}, "argument 'n' must be integer: Input should be a valid integer, unable to parse string as an "
                     'integer (got "seven")'),
    ({"n": 7.5}, "argument 'n' must be integer: Input should be a valid integer, got a number with a fractional part"),
    ({"n": True}, "argument 'n' must be integer: a boolean is not an integer (got true)"),
    ({"n": None}, "argument 'n' must be integer: Input should be a valid integer (got null)"),
    ({"n": 1, "ratio": False}, "argument 'ratio' must be number: a boolean is not a number (got false)"),
    ({"n": 1, "mode": "c"}, "argument 'mode' must be string: Input should be 'a' or 'b' (got \"c\")"),
    ({"n": 1, "label": 5}, "argument 'label' must be string: Input should be a valid string (got 5)"),
    ({}, "missing required argument(s): n"),
    ({"n": 1, "k": 2}, "unknown argument(s): k; expected n, tags, label, ratio, mode"),
    ([1], "arguments must be a JSON object, got list"),
])
def test_bad_arguments_are_one_line_to_the_model(arguments: Any, problem: str) -> None:
    env = ToolEnvironment([pick])
    msg, ok = asyncio.run(env.call(call("pick", arguments)))
    assert not ok and "\n" not in msg["content"]
    assert msg["content"].startswith(f"Error: bad arguments for pick: {problem}"), msg["content"]
    assert pick.check_arguments(arguments) is not None


FLAKY_PLUGIN = textwrap.dedent('''
    """An environment whose expert calls a tool that always fails, then answers."""
    from agentbridge.hooks import hookimpl
    from agentbridge.tools import ToolEnvironment, tool


    @tool
    def broken(query: str) -> str:
        """Always fails."""
        raise RuntimeError("backend down")


    class FlakyEnv(ToolEnvironment):
        def __init__(self, tools=None):
            super().__init__([broken])

        def expert_action(self):
            if not any(m.get("role") == "tool" for m in self.history):
                return '<tool_call>\\n{"name": "broken", "arguments": {"query": "x"}}\\n</tool_call>'
            return "<answer>4</answer>"


    @hookimpl
    def register_environments(register):
        register("flaky/env", FlakyEnv)
''')


@pytest.fixture(scope="module")
def flaky_rollout(tmp_path_factory: pytest.TempPathFactory) -> Any:
    where = tmp_path_factory.mktemp("flaky")
    (where / "flaky_plugin.py").write_text(FLAKY_PLUGIN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(where), os.environ.get("PYTHONPATH", "")]),
           "AGENTBRIDGE_PLUGINS": "flaky_plugin"}

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "agentbridge.cli", "rollout", "examples/calculator.yaml",
                               "-n", "2", "--set", "environment.id=flaky/env", "--set", "environment.args={}",
                               *extra], capture_output=True, text=True, timeout=300, env=env)

    return run, where


def test_rollout_tool_failure_rate(flaky_rollout: Any) -> None:
    run, where = flaky_rollout
    line = ("100% of tool calls failed (2 of 2), above {}; most often: "
            "'Error: broken failed: RuntimeError: backend down'")
    warned = run("-o", str(where / "out"))
    assert warned.returncode == 0, warned.stderr
    assert f"warning: {line.format('20%')}" in warned.stderr.splitlines()
    assert json.loads((where / "out" / "summary.json").read_text())["tools/failure_rate"] == 1.0
    failed = run("--max-tool-failure-rate", "0.2")
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    assert [x for x in failed.stderr.splitlines() if x.startswith(("error", "warning"))] == [
        f"error: {line.format('--max-tool-failure-rate 0.2')}"]
    assert run("--max-tool-failure-rate", "1").returncode == 0
    assert run("--max-tool-failure-rate", "2").returncode == 2  # usage error

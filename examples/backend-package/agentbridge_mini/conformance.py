"""The golden episodes through this backend's path: task rows in, batch rows out, read back (``golden_records``,
which the adapter base's ``conformance`` calls)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentbridge.adapter import write_jsonl
from agentbridge.adapter.conformance import BACKEND_LENGTHS, LENGTHS, GoldenPolicy, golden_spec
from agentbridge_mini.batch import encode_task, records_of
from agentbridge_mini.run import collect_batch, make_agent, read_jsonl


def golden_records(kind: str, workdir: Path) -> list[Any]:
    """The golden spec of ``kind`` (for the lengths kind, this backend's own ``max_len`` below the spec's budgets)
    played into one batch of this backend, written and read back as the suite's records."""
    from agentbridge_mini.backend import MiniBackend

    total = BACKEND_LENGTHS["max_prompt"] + BACKEND_LENGTHS["max_response"]
    spec = golden_spec(kind, ["backend.name=mini", f"backend.options={{max_len: {total}}}"] if kind == LENGTHS
                       else [])
    agent = make_agent(spec, MiniBackend().config(spec)["max_len"])
    rows = [encode_task(t) for t in agent.tasks("train")]
    batch = collect_batch(agent, rows, GoldenPolicy(agent.tokenizer), spec.algorithm.group_size)
    write_jsonl(Path(workdir) / "batch.jsonl", batch)
    return records_of(read_jsonl(Path(workdir) / "batch.jsonl"))

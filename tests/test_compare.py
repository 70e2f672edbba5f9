"""`agentbridge compare`: one spec through several backends, one report; a missing backend never hides the others.

veRL is validated in its own environment (.venv-verl, created by adapters/verl/test.sh before these tests run).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from agentbridge.cli import main

SMALL = ["data.train.size=8", "data.eval.size=4", "algorithm.batch_size=2", "algorithm.group_size=2",
         "algorithm.steps=1", "algorithm.warm_start=null"]


def test_compare_trains_what_it_can_and_reports_every_backend(tmp_path: Path) -> None:
    args = ["compare", "examples/calculator.yaml", "--backends", "trl,verl,nope", "-o", str(tmp_path)]
    for s in SMALL:
        args += ["--set", s]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output  # 'nope' is not installed
    problems = [line for line in result.output.splitlines() if line.startswith("problem: ")]
    assert len(problems) == 1 and problems[0].startswith("problem: nope: unknown backend 'nope'; known: "), problems
    known = problems[0].split("known: ")[1].split(";")[0].split(", ")  # plus any backend a test installed
    assert {"openrlhf", "trl", "verl"} <= set(known) and problems[0].endswith("; pip install agentbridge-nope")
    rows = [json.loads(line) for line in (tmp_path / "runs" / "trl" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and "reward/mean" in rows[0]  # TRL trained its one step
    assert (tmp_path / "jobs" / "verl" / "manifest.json").is_file()
    page = (tmp_path / "report" / "report.html").read_text()
    backends = page.split("<table class='backends'>")[1].split("</table>")[0]
    assert backends.count("<tr>") == 4  # header + three backends
    verl_row = backends.split("<td>verl</td>")[1].split("</tr>")[0]
    assert "<td>ok</td>" in verl_row and "not run here: verl trains on GPUs" in verl_row
    assert "<td>not installed</td>" in backends.split("<td>nope</td>")[1]
    assert (tmp_path / "report" / "reward.png").is_file()
    # what each job will do, read from TRL's GRPOConfig and veRL's composed config: the same DAPO math
    semantics = page.split("<table class='semantics'>")[1].split("</table>")[0]
    assert "<th>trl</th><th>verl</th>" in semantics
    differs = re.findall(r"<tr class='differs'><th[^>]*>([^<]+)</th>", semantics)
    assert not {"advantage", "loss aggregation", "clip", "KL", "sampling", "optimizer"} & set(differs), differs


def test_compare_conformance_puts_the_algorithm_and_step_results_in_the_report(tmp_path: Path) -> None:
    args = ["compare", "examples/calculator.yaml", "--backends", "trl", "--conformance", "--no-train",
            "-o", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    page = (tmp_path / "report" / "report.html").read_text()
    trl_row = page.split("<table class='backends'>")[1].split("<td>trl</td>")[1].split("</tr>")[0]
    conformance = trl_row.split("<td>")[3]
    kinds = re.match(r"identical \(([a-z, ]+)\)(.*?); algorithms: grpo ", conformance)
    assert kinds and {"text", "vlm", "credit"} <= set(kinds.group(1).split(", ")), conformance
    # TRL trains on one reward per episode: no per-token rewards to compare, said once for all kinds
    assert kinds.group(2) == f"; trl: token_rewards not held by the default job; not compared ({kinds.group(1)})"
    assert "dapo ≠ kept" in conformance
    step = conformance.split("; one step (grpo): ")[1].split("</td>")[0].split()
    assert step[0] in ("✔", "≈") and step[1::2] == ["loss", "grad", "update"], step
    # the same cells as the algorithm x backend table: one row per algorithm, a column for TRL, and the legend
    parity = page.split("<table class='parity'>")[1].split("</table>")[0]
    rows = [re.findall(r"<t[hd][^>]*>([^<]*)</t[hd]>", r) for r in parity.split("</tr>") if "<t" in r]
    assert rows[0] == ["algorithm", "trl"] and [r[0] for r in rows[1:4]] == ["grpo", "dr_grpo", "dapo"], rows
    assert dict(rows[1:])["dapo"] == "≠ kept" and dict(rows[1:])["grpo"] in ("✔", "≈")
    assert "≠ a documented difference" in page.split("<table class='parity'>")[1].split("<p class='legend'>")[1]

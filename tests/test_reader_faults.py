"""Hostile and careless input to the readers: ``agentbridge view`` and ``agentbridge report`` on a real run directory
poisoned with malformed rows and files. Each bad row or file is one line naming its file (and line), through the
CLI, with a clean exit; the good rows are still drawn."""

from __future__ import annotations

import asyncio
import html
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from agentbridge.cli import main
from agentbridge.rollout import ScriptedPolicy
from agentbridge.rollout.agent import Agent
from agentbridge.runs import MAX_PROBLEMS_PER_FILE, manifest
from agentbridge.spec import load_spec
from agentbridge.training.logger import RunLogger

SPEC = "examples/calculator.yaml"
HOSTILE = "<script>window.injected = 1</script>"

# wrong values for every field of an episode row, and of a turn in it
EPISODE_FAULTS: dict[str, list[Any]] = {
    "step": ["x", -1, 1.5, [1], True],
    "task_id": [5, None, ["a"], {"id": "a"}],
    "prompt_ids": [[1e30], [-1], [1.5], ["5"], [True], [None], [2**40], "1 2 3", {"a": 1}, 7],
    "response_ids": [[1e30], [-1], [2.0], ["5"], [[1]], "ids", 3],
    "response_mask": [[2], [-1], [0.5], ["1"], [True], 7, "1"],
    "logprobs": [["x"], [None], "nan", 1.0, [[0.1]]],
    "images": ["two", -1, 1.5, [1], {"n": 1}],
    "turns": [5, "turn", None, [5], ["text"], [None]],
    "reward": [HOSTILE, None, True, [1], {"r": 1}],
    "reward_components": [[1, 2], {"a": "x"}, {"a": None}, "components", 1.0],
    "finish_reason": [5, None, ["done"]],
    "metrics": [[1], {"a": "b"}, "m"],
    "error": [5, ["e"], {"e": 1}],
}
TURN_FAULTS: dict[str, list[Any]] = {
    "text": [5, None, ["t"]],
    "tool_calls": [3, "call", [5], [["call"]]],
    "observations": [5, "tool says", [5], [{"content": 5}], [{"role": 1}],
                     [{"content": [{"type": "text", "text": 5}]}], [{"content": [5]}], [{"name": ["n"]}]],
    "reward": ["high", None],
    "scores": [[1], {"a": "b"}],
    "credit": ["c"],
    "end": [1.5, "e"],
    "message_index": ["m"],
    "generated_tokens": ["many", -3, 2.5],
    "observation_tokens": [-1, "o"],
    "generate_s": ["s"],
    "env_s": [[1]],
}
NOT_ROWS = [b"not json at all", b'{"step": 1, "task_id": "cut sh', b"[1, 2]", b"3", b"null", b'"a string"', b"true",
            b"\xff\xfe\x00garbage", b"1" * 5000, b"[" * 100_000, b"{}", b'{"task_id": "no turns"}']


def write_lines(path: Path, lines: list[bytes]) -> list[int]:
    """Append ``lines`` to ``path``; their line numbers."""
    start = len(path.read_bytes().splitlines())
    with path.open("ab") as f:
        f.write(b"".join(line + b"\n" for line in lines))
    return list(range(start + 1, start + 1 + len(lines)))


def dumps(row: Any) -> bytes:
    return json.dumps(row, ensure_ascii=False).encode()


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory as a training run writes it (``RunLogger``: metrics.jsonl, episodes.jsonl), with its
    manifest, its job's spec and an eval.json: two steps of three scripted calculator episodes."""
    root = tmp_path_factory.mktemp("faults")
    spec = load_spec(SPEC)
    agent = Agent.from_spec(spec)
    tasks = agent.tasks("eval", size=3)
    job = root / "job"
    job.mkdir()
    (job / "spec.yaml").write_text(Path(SPEC).read_text())
    run_dir = root / "run"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text(json.dumps(manifest(kind="run", spec_hash="abc", seed=0, backend="trl",
                                                               job=str(job))))
    logger = RunLogger(run_dir, prefix="trl")
    for step in (1, 2):
        logger.add_batch(asyncio.run(agent.run(tasks, lambda env: ScriptedPolicy.for_env(env, agent.tokenizer))), 0.0)
        logger.log(step, {"loss": 0.5 / step, "kl": 0.01 * step})
    arm = {"metric": "calc/exact", "mean": 0.5, "n": 10, "ci95_low": 0.4, "ci95_high": 0.6}
    (run_dir / "eval.json").write_text(json.dumps({"before_rl": arm, "after_rl": {**arm, "mean": 0.55}}))
    return run_dir


def copy_run(clean: Path, tmp_path: Path, name: str = "run") -> Path:
    return Path(shutil.copytree(clean, tmp_path / name))


def invoke(*args: str) -> Result:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert "Traceback" not in result.output
    return result


def notes_by_line(stderr: str, path: Path) -> dict[int, list[str]]:
    """The stderr lines about ``path:N:``, by N."""
    out: dict[int, list[str]] = {}
    for line in stderr.splitlines():
        match = re.match(rf"^(?:note|problem): {re.escape(str(path))}:(\d+): ", line)
        if match:
            out.setdefault(int(match[1]), []).append(line)
    return out


def test_view_skips_each_malformed_episode_row_by_file_and_line_and_draws_the_rest(clean_run: Path,
                                                                                   tmp_path: Path) -> None:
    run = copy_run(clean_run, tmp_path)
    episodes = run / "episodes.jsonl"
    good = [json.loads(line) for line in episodes.read_text().splitlines()]
    assert len(good) == 6
    model = next(e for e in good if "response_ids" in e)  # a row with its token lists
    assert set(EPISODE_FAULTS) == set(model) and set(TURN_FAULTS) == set(model["turns"][0])  # every field

    bad_rows = [{**model, key: value} for key, values in EPISODE_FAULTS.items() for value in values]
    bad_rows += [{**model, "turns": [{**model["turns"][0], key: value}]}
                 for key, values in TURN_FAULTS.items() for value in values]
    bad = write_lines(episodes, [dumps(r) for r in bad_rows] + NOT_ROWS)
    drawn = [{**model, "task_id": "nan-reward", "reward": float("nan")},  # a number all the same
             {**model, "task_id": "no-step", "step": None}, {**model, "task_id": "min", "turns": [{}]}]
    flagged = [{**model, "task_id": "past-vocab", "response_ids": [5, 1_000_000, *model["response_ids"][2:]]},
               {**model, "task_id": "short-mask", "response_mask": model["response_mask"][1:]}]
    drawn_lines = write_lines(episodes, [dumps(r) for r in drawn + flagged])
    with episodes.open("ab") as f:
        f.write(b'{"step": 3, "task_id": "cut')  # a write cut short, no newline
    bad.append(drawn_lines[-1] + 1)
    assert len(bad) + len(flagged) < MAX_PROBLEMS_PER_FILE  # each one is listed

    result = invoke("view", str(run))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"wrote {run / 'view.html'} ({len(good) + len(drawn) + len(flagged)} episodes)"
    lines = result.stderr.splitlines()
    assert all(line.startswith("note: ") for line in lines), lines
    named = notes_by_line(result.stderr, episodes)
    assert sorted(named) == sorted(bad + drawn_lines[-2:]), sorted(set(named) ^ set(bad + drawn_lines[-2:]))
    assert all(len(v) == 1 for v in named.values())  # one line each
    assert [n for n, [line] in named.items() if line.endswith("; skipped")] == bad
    assert "token id 1000000 is outside the vocabulary of builtin:tiny (4096 tokens)" in named[drawn_lines[-2]][0]
    assert "the loss mask has" in named[drawn_lines[-1]][0]
    for n, row in zip(bad, bad_rows, strict=False):  # each names the field at fault
        field = next(k for k in row if json.dumps(row[k]) != json.dumps(model[k]))
        assert f": not an episode: {field}" in named[n][0], (named[n], field)
    assert "not UTF-8" in named[bad[len(bad_rows) + 7]][0]
    assert "not a JSON object (a list)" in named[bad[len(bad_rows) + 2]][0]

    page = (run / "view.html").read_text()
    assert page.count('<section class="episode"') == len(good) + len(drawn) + len(flagged)
    for e in good:
        assert f'<b class="task">{html.escape(e["task_id"])}</b>' in page
    for task in ("nan-reward", "no-step", "min", "past-vocab", "short-mask"):
        assert f'<b class="task">{task}</b>' in page
    assert "[1000000]" in page  # the id past the vocabulary, drawn as itself
    for n in named:  # the same lines head the page
        assert f'<p class="note">{html.escape(str(episodes))}:{n}: ' in page
    assert "window.injected" in page and HOSTILE not in page and page.count("<script>") == 1  # still escaped


def test_view_of_a_file_of_garbage_lists_the_first_problems_then_a_count(clean_run: Path, tmp_path: Path) -> None:
    run = copy_run(clean_run, tmp_path)
    extra = 3 * MAX_PROBLEMS_PER_FILE
    write_lines(run / "episodes.jsonl", [b"garbage"] * extra)
    result = invoke("view", str(run))
    assert result.exit_code == 0 and result.stdout.strip().endswith("(6 episodes)")
    assert len(notes_by_line(result.stderr, run / "episodes.jsonl")) == MAX_PROBLEMS_PER_FILE
    assert result.stderr.splitlines()[-1] == (f"note: {run / 'episodes.jsonl'}: {extra - MAX_PROBLEMS_PER_FILE} "
                                              "more malformed lines not listed")


@pytest.mark.parametrize("content", [b"[1, 2]", b'"manifest"', b'{"job": ', b"\xff\xfe", b'{"job": 5}'])
def test_view_with_a_malformed_manifest_or_spec_still_draws(clean_run: Path, tmp_path: Path, content: bytes) -> None:
    run = copy_run(clean_run, tmp_path)
    (run / "manifest.json").write_bytes(content)
    (run / "spec.yaml").write_bytes(b"model: [unclosed\n")
    result = invoke("view", str(run))
    assert result.exit_code == 0 and result.stdout.strip().endswith("(6 episodes)"), result.output
    lines = result.stderr.splitlines()
    assert f"note: {run / 'spec.yaml'}: cannot be read" in "\n".join(lines)
    if content != b'{"job": 5}':
        assert any(line.startswith(f"note: {run / 'manifest.json'}: ") for line in lines), lines
    assert lines[-1].endswith("pass --model to decode them)")  # nothing said which model: ids are shown


METRIC_FAULTS: list[tuple[bytes, str]] = [  # a line, and what its one problem line says
    (b'{"step": "x", "reward/mean": 0.1}', 'step is not a finite number (got "x"); skipped'),
    (b'{"step": NaN, "reward/mean": 0.1}', "step is not a finite number (got NaN); skipped"),
    (b'{"step": null, "reward/mean": 0.1}', "step is not a finite number (got null); skipped"),
    (b'{"step": true, "reward/mean": 0.1}', "step is not a finite number (got true); skipped"),
    (b'{"step": 1e400, "reward/mean": 0.1}', "step is not a finite number (got Infinity); skipped"),
    (b'{"step": ' + b"9" * 400 + b', "reward/mean": 0.1}', "step is not a finite number"),
    (b'{"step": [3], "reward/mean": 0.1}', "step is not a finite number (got [3]); skipped"),
    (b'{"step": 3, "reward/mean": "high"}', 'reward/mean is not a finite number (got "high"); skipped'),
    (b'{"step": 3, "reward/mean": Infinity}', "reward/mean is not a finite number (got Infinity); skipped"),
    (b'{"step": 3}', "lacks reward/mean"),
    (b"not json", "not valid JSON"),
    (b'{"step": 3, "reward/mean": 0.', "not valid JSON"),
    (b"[1, 2]", "not a JSON object (a list); skipped"),
    (b"42", "not a JSON object (a number); skipped"),
    (b"null", "not a JSON object (a null); skipped"),
    (b"\xff\xfe{}", "not UTF-8 text; skipped"),
]
KEPT_FAULTS: list[tuple[bytes, str]] = [  # rows drawn without the values named
    (b'{"step": 3, "reward/mean": 0.4, "time/step_s": "fast"}', 'not a finite number: time/step_s ("fast"); left out'),
    (b'{"step": 4, "reward/mean": 0.5, "trl/loss": NaN, "memory/peak_gb": -Infinity}',
     "not a finite number: trl/loss (NaN), memory/peak_gb (-Infinity); left out"),
    (b'{"step": 5, "reward/mean": 0.6, "tools/calls": [1], "finish/done": {"a": 1}, "trl/kl": true, "x": null}',
     "not a finite number: tools/calls ([1]), finish/done ({\"a\": 1}), trl/kl (true) and 1 more; left out"),
]


def test_report_names_each_malformed_metrics_row_and_draws_the_rest(clean_run: Path, tmp_path: Path) -> None:
    run = copy_run(clean_run, tmp_path)
    metrics = run / "metrics.jsonl"
    bad = write_lines(metrics, [line for line, _ in METRIC_FAULTS])
    kept = write_lines(metrics, [line for line, _ in KEPT_FAULTS])
    (run / "eval.json").write_text('{"before_rl": {"mean": "x"}, "after_rl": {"mean": NaN}, "sft_control": 5, '
                                   '"before_training": {"mean": 0.9, "ci95_low": 0.95}, "paired": "anything"}')
    (run / "manifest.json").write_text(json.dumps({**json.loads((run / "manifest.json").read_text()),
                                                   "backend": "$\\undefined{$", "seed": "0", "versions": [1]}))
    with metrics.open("a") as f:
        f.write('{"step": 9, "reward/mean": 0.9, "$\\nope{$/kl": 1.0}\n')  # mathtext in a backend's own metric

    out = tmp_path / "out"
    result = invoke("report", str(run), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"wrote {out / 'report.html'}"
    lines = result.stderr.splitlines()
    assert all(line.startswith("problem: ") for line in lines), lines
    named = notes_by_line(result.stderr, metrics)
    assert sorted(named) == bad + kept and all(len(v) == 1 for v in named.values())
    for n, (_, says) in zip(bad + kept, METRIC_FAULTS + KEPT_FAULTS, strict=True):
        assert says in named[n][0], (named[n], says)
    evals, manifest_path = run / "eval.json", run / "manifest.json"
    assert f'problem: {evals}: before_rl: mean: Input should be a valid number (got "x"); not drawn' in lines
    assert f"problem: {evals}: after_rl: mean: Input should be a finite number (got NaN); not drawn" in lines
    assert any(line.startswith(f"problem: {evals}: sft_control: Input should be") for line in lines)
    assert (f"problem: {evals}: before_training: the interval [0.95, 0.9] does not hold the mean 0.9; not drawn"
            in lines)
    assert f'problem: {manifest_path}: seed: Input should be a valid integer (got "0"); not compared' in lines
    assert f"problem: {manifest_path}: versions: Input should be a valid dictionary (got [1]); not compared" in lines

    page = (out / "report.html").read_text()
    runs_table = page.split("<table class='runs'>")[1].split("</table>")[0]
    cells = re.findall(r"<td>([^<]*)</td>", runs_table)
    assert cells[2] == "6" and cells[3] == "0.900"  # steps 1, 2, 3, 4, 5 and 9 drawn; the last one's reward
    for n in bad + kept:
        assert f"<li>problem: {html.escape(str(metrics))}:{n}: " in page or f"<li>{html.escape(str(metrics))}:{n}: " \
            in page
    for png in ("reward.png", "kl.png", "memory.png", "finish.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG" and f'src="{png}"' in page


@pytest.mark.parametrize(("name", "content", "says"), [
    ("list", b"[1, 2]", "not a JSON object (a list); versions and settings cannot be compared"),
    ("string", b'"run"', "not a JSON object (a string); versions and settings cannot be compared"),
    ("number", b"7", "not a JSON object (a number)"),
    ("null", b"null", "not a JSON object (a null)"),
    ("invalid", b'{"backend": "trl",', "not valid JSON (Expecting property name enclosed in double quotes at line 1)"),
    ("binary", b"\x89PNG\r\n", "not UTF-8 text"),
    ("deep", b"[" * 100_000, "not valid JSON"),
    ("types", b'{"backend": 5, "spec_hash": ["a"], "chat_template_hash": {}, "versions": {"trl": 1}}',
     "backend: Input should be a valid string (got 5); not compared"),
])
def test_report_on_a_malformed_manifest_or_eval(clean_run: Path, tmp_path: Path, name: str, content: bytes,
                                                says: str) -> None:
    good = copy_run(clean_run, tmp_path, "good")
    run = copy_run(clean_run, tmp_path, name)
    (run / "manifest.json").write_bytes(content)
    (run / "eval.json").write_bytes(content)
    out = tmp_path / "out"
    result = invoke("report", str(good), str(run), "-o", str(out))
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert all(line.startswith(("problem: ", "warning: ")) for line in lines), lines
    assert f"problem: {run / 'manifest.json'}: {says}" in result.stderr, lines
    if name != "types":
        assert any(line.startswith(f"problem: {run / 'eval.json'}: ") for line in lines), lines
    page = (out / "report.html").read_text()
    rows = page.split("<table class='runs'>")[1].split("</table>")[0].split("</tr>")
    assert [re.findall(r"<td>([^<]*)</td>", r)[2] for r in rows[1:3]] == ["2", "2"]  # both runs' steps
    assert (out / "reward.png").is_file() and (out / "heldout.png").is_file()

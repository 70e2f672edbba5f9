"""Bad spec input, tried from outside: every mistake is one clear line (file or --set, field, line) before any work.

Covers the YAML reader's bounds (aliases, size, nesting), duplicate keys, YAML 1.2 numbers, unreadable files, the
order and attribution of problems, non-finite reward weights and the intervals shown for success rates.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from agentbridge.cli import MAX_ERROR_LINES, main
from agentbridge.plugins import get_plugins
from agentbridge.spec import SpecError, dump_spec, load_spec
from agentbridge.spec.load import MAX_DEPTH, MAX_SPEC_BYTES, MAX_VALUES

BASE = Path("examples/calculator.yaml").read_text()


def write(tmp_path: Path, text: str | bytes, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def one_problem(path: Path, sets: list[str] | None = None, **kwargs: Any) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(path, sets, **kwargs)
    (line,) = info.value.problems
    assert "\n" not in line and "Traceback" not in line
    return line


def line_of(text: str, needle: str) -> int:
    return next(i for i, x in enumerate(text.splitlines(), 1) if needle in x)


def laughs(levels: int, fan: int = 9) -> str:
    """Nested aliases: ``fan ** levels`` values from a few hundred bytes."""
    out = [f"l0: &l0 [{', '.join(['lol'] * fan)}]"]
    out += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fan)}]" for i in range(1, levels + 1)]
    return "\n".join(out) + "\n"


def validate(*args: str) -> Any:
    return CliRunner().invoke(main, ["validate", *args])


# class 1: the reader's bounds, duplicate keys, numbers, unreadable files, many problems


def test_nested_aliases_are_refused_at_the_line_that_passes_the_bound(tmp_path: Path) -> None:
    text = BASE + laughs(5)   # 9**6 values once expanded (the memory test below tries 9**13)
    p = one_problem(write(tmp_path, text))
    assert p.startswith(f"{tmp_path / 'spec.yaml'}:{line_of(text, 'l4: &l4')}: ") and f"{MAX_VALUES} values" in p
    # a smaller one under environment.args (9**5 values) was accepted and compiled into a job of megabytes
    nested = "".join(f"    {x}\n" for x in laughs(4).splitlines())
    text = BASE.replace("  args: {timeout_s: 5.0, expert_in_head: 0.7}\n", f"  args:\n{nested}")
    assert f"{MAX_VALUES} values" in one_problem(write(tmp_path, text))


def test_a_recursive_alias_is_one_line(tmp_path: Path) -> None:
    p = one_problem(write(tmp_path, BASE + "x: &a [1, *a]\n"))
    assert p.endswith(":50: alias *a is inside the node it names")


def test_aliases_and_merge_keys_within_bounds_still_work(tmp_path: Path) -> None:
    text = BASE.replace("  train: {id: math/arithmetic, split: train, size: 2000, seed: 0}",
                        "  train: &t {id: math/arithmetic, split: train, size: 2000, seed: 0}").replace(
        "  dev: {id: math/arithmetic, split: dev, size: 100, seed: 0}", "  dev: {<<: *t, split: dev, size: 100}")
    spec = load_spec(write(tmp_path, text), ["data.train.seed=7"])
    assert spec.data.dev is not None and (spec.data.dev.id, spec.data.dev.size) == ("math/arithmetic", 100)
    assert spec.data.train.seed == 7 and spec.data.dev.seed == 0   # --set changes one place, not the alias too


def test_size_limit(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + "#" * MAX_SPEC_BYTES)
    p = one_problem(path)
    assert p.startswith(f"{path}: is over the {MAX_SPEC_BYTES}-byte limit for a spec file")


def test_nesting_limit(tmp_path: Path) -> None:
    text = BASE + "x: " + "[" * 1000 + "]" * 1000 + "\n"
    assert one_problem(write(tmp_path, text)).endswith(f":50: nested more than {MAX_DEPTH} levels deep")


def test_duplicate_keys_name_both_lines(tmp_path: Path) -> None:
    text = BASE.replace("  max_turns: 4\n", "  max_turns: 4\n  max_turns: 5\n")
    first = line_of(text, "max_turns: 4")
    assert one_problem(write(tmp_path, text)) == (f"{tmp_path / 'spec.yaml'}:{first + 1}: duplicate key "
                                                  f"'max_turns' (first on line {first})")
    text = BASE.replace("name: calculator", "name: calculator\nname: other")
    assert one_problem(write(tmp_path, text)).endswith(":3: duplicate key 'name' (first on line 2)")
    p = one_problem(write(tmp_path, BASE), ["environment.args={a: 1, a: 2}"])
    assert p.startswith("--set environment.args={a: 1, a: 2}: value is not valid YAML (duplicate key 'a'")


def test_yaml_1_2_numbers_in_files_and_set_values(tmp_path: Path) -> None:
    text = BASE.replace("lr: 1.0e-4", "lr: 1e-5").replace("args: {timeout_s: 5.0,", "args: {timeout_s: 5e0, z: 017,")
    spec = load_spec(write(tmp_path, text), ["backend.overrides.learning_rate=1e-5", "backend.overrides.q='1e-5'"])
    assert spec.algorithm.lr == 1e-5 and spec.environment.args["timeout_s"] == 5.0
    assert spec.environment.args["z"] == 17
    lr = spec.backend.overrides["learning_rate"]
    assert isinstance(lr, float) and lr == 1e-5 and spec.backend.overrides["q"] == "1e-5"
    # the resolved spec reads back to the same values, in YAML 1.2 and in a YAML 1.1 reader
    spec = load_spec(write(tmp_path, BASE), ["environment.args.s='1_000'", "environment.args.t='1e-5'"])
    dumped = dump_spec(spec)
    assert load_spec(write(tmp_path, dumped, "dumped.yaml")) == spec
    assert yaml.safe_load(dumped)["environment"]["args"] | {"s": "1_000", "t": "1e-5"} == spec.environment.args


@pytest.mark.parametrize(("content", "problem"), [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "is not a text file (it holds NUL bytes)"),
    (BASE.encode().replace(b"Solve", b"Solv\xe9"), "is not UTF-8 text (byte 0xe9 at offset"),
])
def test_binary_file_is_one_line_naming_it(tmp_path: Path, content: bytes, problem: str) -> None:
    path = write(tmp_path, content)
    assert one_problem(path).startswith(f"{path}: {problem}")


def test_control_character_names_its_line(tmp_path: Path) -> None:
    text = BASE.replace("Solve", "Sol\x07ve")
    p = one_problem(write(tmp_path, text))
    assert p == f"{tmp_path / 'spec.yaml'}:{line_of(text, 'Sol')}: character #x0007 is not allowed in YAML"


def test_directory_and_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "specs.yaml"
    folder.mkdir()
    assert one_problem(folder) == f"{folder}: is a directory, not a spec file"
    path = write(tmp_path, BASE)

    def denied(self: Path, *args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "open", denied)
    assert one_problem(path) == f"{path}: cannot read it (permission denied)"


@pytest.mark.parametrize(("value", "problem"), [
    ("!!int abc", "cannot read 'abc' as int"),
    ("!!timestamp 2020-99-99", "cannot read '2020-99-99' as timestamp"),
    ("!!python/object:os.system x", "could not determine a constructor"),
    ("*nowhere", "YAML syntax error: found undefined alias 'nowhere'"),
])
def test_odd_tags_and_aliases_are_one_line(tmp_path: Path, value: str, problem: str) -> None:
    assert f":50: {problem}" in one_problem(write(tmp_path, f"{BASE}x: {value}\n"))


def test_thousands_of_problems_print_a_few_lines() -> None:
    res = validate("examples/calculator.yaml", *(f"--set=k{i}=1" for i in range(3000)))
    errors = [x for x in res.stderr.splitlines() if x.startswith("error: ")]
    assert res.exit_code == 1 and len(errors) == MAX_ERROR_LINES + 1
    assert errors[-1] == f"error: ... and {3000 - MAX_ERROR_LINES} more"


def test_validate_memory_stays_bounded_on_files_up_to_the_limit(tmp_path: Path) -> None:
    """Worst cases of at most MAX_SPEC_BYTES, each through `agentbridge validate` in one process."""
    fill = MAX_SPEC_BYTES
    cases = {
        "laughs": BASE + laughs(12),
        "flat": ("x: [" + "0," * fill)[:fill],
        "keys": "".join(f"k{i}: {i}\n" for i in range(fill // 8))[:fill],
        "anchors": ("".join(f"a{i}: &a{i} [1, 2, 3]\n" for i in range(2000))
                    + "b: [" + ", ".join(f"*a{i % 2000}" for i in range(fill // 6)))[:fill],
        "deep": ("x: " + "[" * fill)[:fill],
        "string": 'name: "' + "x" * (fill - 10) + '"\n',
        "unknown": BASE + "".join(f"k{i}: {i}\n" for i in range(4000)),
        "ids": BASE.replace("tools: [calculator]", "tools: [" + ", ".join(f"t{i}" for i in range(4000)) + "]"),
    }
    paths = []
    for name, text in cases.items():
        assert len(text.encode()) <= MAX_SPEC_BYTES, name
        paths.append(str(write(tmp_path, text, f"{name}.yaml")))
    probe = (  # the data limit makes a reader that expands aliases fail here instead of taking the machine's memory
        "import json, os, resource, sys\nresource.setrlimit(resource.RLIMIT_DATA, (1 << 30, 1 << 30))\n"
        "from click.testing import CliRunner\nfrom agentbridge.cli import main\n"
        "out = []\nfor path in sys.argv[1:]:\n"
        "    res = CliRunner().invoke(main, ['validate', path])\n"
        "    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
        "    for line in open('/proc/self/status') if os.path.exists('/proc/self/status') else []:\n"
        "        if line.startswith('VmHWM:'):\n"
        "            peak = int(line.split()[1]) / 1024  # this process's own peak (ru_maxrss counts the parent's)\n"
        "    out.append([path, res.exit_code, type(res.exception).__name__, len(res.output.splitlines()), peak])\n"
        "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", probe, *paths], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for path, code, exception, lines, peak_mb in json.loads(done.stdout.strip().splitlines()[-1]):
        assert code == 1 and exception == "SystemExit" and lines <= MAX_ERROR_LINES + 3, path
        assert peak_mb < 200, f"{path}: {peak_mb:.0f} MB"


# class 4: the most specific problems first, ids with line numbers, --set problems blamed on the --set


def test_unknown_environment_is_reported_first_even_with_fields_missing(tmp_path: Path) -> None:
    path = write(tmp_path, "name: x\nenvironment: {id: nope/env}\nagent: {max_turnz: 1}\n")
    res = validate(str(path))
    errors = res.stderr.splitlines()
    assert res.exit_code == 1 and len(errors) == 4
    assert errors[0].startswith(f"error: {path}:2: environment.id: unknown environment 'nope/env'")
    assert errors[1] == f"error: {path}:3: agent.max_turnz: unknown key"
    assert errors[2:] == [f"error: {path}: reward: required field is missing",
                          f"error: {path}: data: required field is missing"]


def test_ids_carry_line_numbers(tmp_path: Path) -> None:
    text = BASE.replace("id: math/calculator", "id: math/calculater").replace(
        "tools: [calculator]", "tools: [calculator, nope_tool]").replace("{id: core/format,", "{id: core/formatt,")
    path = write(tmp_path, text)
    res = validate(str(path))
    tools = ", ".join(get_plugins().tools.ids())
    assert res.exit_code == 1
    assert res.stderr.splitlines() == [
        f"error: {path}:{line_of(text, 'math/calculater')}: environment.id: unknown environment 'math/calculater'; "
        "did you mean 'math/calculator'?",
        f"error: {path}:{line_of(text, 'nope_tool')}: tools[1]: unknown tool 'nope_tool'; known: {tools}",
        f"error: {path}:{line_of(text, 'core/formatt')}: reward[1].id: unknown reward 'core/formatt'; "
        "did you mean 'core/format'?",
    ]


def test_set_problems_are_blamed_on_the_set(tmp_path: Path) -> None:
    path = write(tmp_path, BASE)
    assert one_problem(path, ["algorithm={steps: many}"]).startswith(
        "--set algorithm={steps: many}: algorithm.steps: Input should be a valid integer")
    assert one_problem(path, ["reward.-1.weight=heavy"]).startswith("--set reward.-1.weight=heavy: reward[1].weight: ")
    # a problem of the mapping a --set changed: the file's line, and the --set that changed it
    p = one_problem(path, ["agent.max_tokens_per_turn=999"])
    assert p.startswith(f"{path}:{line_of(BASE, 'agent:')} (after --set agent.max_tokens_per_turn=999): agent: ")
    res = validate(str(path), "--set", "environment.id=math/nope")
    assert res.exit_code == 1 and res.stderr.startswith(
        "error: --set environment.id=math/nope: environment.id: unknown environment 'math/nope'")


# class 3: reward weights are finite


@pytest.mark.parametrize("weight", [".nan", ".inf", "-.inf", "nan", "1e999"])
def test_non_finite_reward_weight_is_one_line(tmp_path: Path, weight: str) -> None:
    text = BASE.replace("{id: core/format, weight: 0.1}", f"{{id: core/format, weight: {weight}}}")
    p = one_problem(write(tmp_path, text))
    assert p == f"{tmp_path / 'spec.yaml'}:{line_of(text, 'core/format')}: reward[1].weight: Input should be a " \
                "finite number"
    p = one_problem(write(tmp_path, BASE), [f"reward.0.weight={weight}"])
    assert p.startswith(f"--set reward.0.weight={weight}: reward[0].weight: ") and "finite" in p


# class 8: success rates are shown with Wilson intervals


def test_success_rates_show_wilson_intervals(tmp_path: Path) -> None:
    pytest.importorskip("scipy")
    pytest.importorskip("matplotlib")
    from agentbridge.training.evaluate import EvalResult
    from agentbridge.training.report import write_report

    def arm(successes: int) -> dict[str, Any]:
        return EvalResult(metric="m", task_ids=[str(i) for i in range(8)],
                          scores=[1.0] * successes + [0.0] * (8 - successes)).summary()

    evals = {"before_rl": arm(0), "after_rl": arm(2)}
    assert evals["after_rl"]["ci95_low"] == pytest.approx(0.0715, abs=1e-4)   # not 0.250 - 0.321 < 0
    assert evals["before_rl"]["ci95_high"] == pytest.approx(0.3244, abs=1e-4)  # not ± 0.000
    (tmp_path / "eval.json").write_text(json.dumps(evals))
    report = write_report(tmp_path).read_text()
    assert "| after_rl | 0.250 | [0.071, 0.591] | 8 |" in report
    assert "| before_rl | 0.000 | [0.000, 0.324] | 8 |" in report


def test_no_rate_is_shown_with_a_normal_approximation() -> None:
    """A rate as ``0.250 ± 0.321`` (mean ± 1.96 standard errors) goes below 0 and above 1 on few tasks."""
    shown = re.compile(r"\b[01]\.\d{2,3} ?± ?\d\.\d{2,3}\b")
    roots = [Path("agentbridge"), Path("adapters"), Path("plugins"), Path("bench"), Path("examples")]
    files = [p for root in roots for p in root.rglob("*") if p.suffix in (".py", ".md", ".jinja")
             and ".venv" not in p.parts and "site-packages" not in p.parts]
    files += [Path("README.md")]
    found = [f"{p}:{i}" for p in files for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if shown.search(line) or ("1.96" in line and "sqrt" in line)]
    assert len(files) > 10 and not found

"""Property test: a malformed spec file or ``--set`` value makes ``agentbridge validate`` exit 1 with a few
``error:`` lines, never a traceback, in bounded time."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentbridge.cli import MAX_ERROR_LINES, main
from agentbridge.plugins import get_plugins

BASE = Path("examples/calculator.yaml").read_text()
FIELDS = ["name", "agent.max_turns", "agent.sampling.top_p", "environment.id", "environment.args.x", "tools",
          "tools.0", "reward.0.weight", "reward.1.id", "data.train.size", "algorithm.lr", "algorithm.warm_start",
          "backend.overrides.learning_rate", "seed", "model", "reward"]
SETTINGS = settings(max_examples=50, deadline=timedelta(seconds=5), derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def laughs(levels: int, fan: int) -> str:
    out = [f"l0: &l0 [{', '.join(['x'] * fan)}]"]
    out += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fan)}]" for i in range(1, levels + 1)]
    return "\n".join(out) + "\n"


@st.composite
def mutated_files(draw: Any) -> bytes:
    """The example spec, damaged in one of several ways, plus a top-level unknown key no ``--set`` can remove."""
    text = BASE
    kind = draw(st.sampled_from(["insert", "delete_line", "replace", "truncate", "bytes", "laughs", "nesting"]))
    at = draw(st.integers(0, len(text)))
    if kind == "insert":
        text = text[:at] + draw(st.text(max_size=40)) + text[at:]
    elif kind == "delete_line":
        lines = text.splitlines(keepends=True)
        del lines[draw(st.integers(0, len(lines) - 1))]
        text = "".join(lines)
    elif kind == "replace":
        text = text[:at] + draw(st.text(max_size=20)) + text[at + draw(st.integers(0, 60)):]
    elif kind == "truncate":
        text = text[:at]
    elif kind == "laughs":
        text += laughs(draw(st.integers(1, 6)), draw(st.integers(2, 6)))  # up to 6**7 values: bounded if expanded
    elif kind == "nesting":
        depth = draw(st.integers(1, 5000))
        text += "deep: " + "[" * depth + "]" * draw(st.integers(0, depth)) + "\n"
    else:
        return draw(st.binary(max_size=200)) + b"\nzz_fault: 1\n"
    return (text + f"\nzz_fault: {draw(st.text(max_size=10))!r}\n").encode("utf-8", "surrogatepass")


set_items = st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(FIELDS), st.text(max_size=30)),
    st.builds(lambda k, v: f"{k}={v}", st.text(max_size=20), st.text(max_size=30)),
    st.text(max_size=30),
)
bad_set = st.one_of(
    st.builds(lambda k, v: f"zz_{k}={v}", st.text(max_size=10), st.text(max_size=10)),   # an unknown key
    st.text(alphabet=st.characters(blacklist_characters="="), max_size=20),            # no '='
    st.builds(lambda v: f"algorithm.steps={v}", st.sampled_from(["0", "-3", "many", "[1]", "{a: 1}", ".nan"])),
)


def check(result: Any, seconds: float) -> None:
    output = result.output
    assert result.exit_code == 1, output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in output
    errors = [x for x in output.splitlines() if not x.startswith("warning: ")]
    assert 1 <= len(errors) <= MAX_ERROR_LINES + 1 and all(x.startswith("error: ") for x in errors), output
    assert seconds < 5


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    get_plugins()  # load the plugins once, outside the timed examples
    return tmp_path_factory.mktemp("fuzz")


@SETTINGS
@given(content=mutated_files(), sets=st.lists(set_items, max_size=2))
def test_malformed_files_fail_in_a_few_lines(workdir: Path, content: bytes, sets: list[str]) -> None:
    path = workdir / "spec.yaml"
    path.write_bytes(content)
    started = time.perf_counter()
    result = CliRunner().invoke(main, ["validate", str(path), *(f"--set={s}" for s in sets)])
    check(result, time.perf_counter() - started)


@SETTINGS
@given(sets=st.lists(set_items, max_size=3), bad=bad_set, where=st.integers(0, 3))
def test_malformed_set_values_fail_in_a_few_lines(sets: list[str], bad: str, where: int) -> None:
    sets.insert(min(where, len(sets)), bad)
    started = time.perf_counter()
    result = CliRunner().invoke(main, ["validate", "examples/calculator.yaml", *(f"--set={s}" for s in sets)])
    check(result, time.perf_counter() - started)

"""Dataset sizes: a declared capacity refuses a size it cannot fill before any task is built, a dataset that
returns fewer tasks than asked is one line naming it, and a huge size ends fast instead of hanging."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from agentbridge.datasets import (
    build_split,
    capacity_line,
    dataset_size_problems,
    declared_capacity,
    declares_capacity,
    seed_block_capacity,
)
from agentbridge.env import Task
from agentbridge.hooks import hookimpl
from agentbridge.plugins import Plugins
from agentbridge.spec import load_spec
from agentbridge.spec.schema import DatasetSpec, Spec

ROOT = Path(__file__).resolve().parents[1]
CALCULATOR = ROOT / "examples" / "calculator.yaml"
AGENTBRIDGE = Path(sys.executable).with_name("agentbridge")


def make(n: int, split: str) -> list[Task]:
    return [Task(id=f"{split}-{i}", prompt=f"task {i}") for i in range(n)]


def few_tasks(split: str = "train", size: int = 100, seed: int = 0) -> list[Task]:
    """A careless third-party dataset: five tasks whatever the size."""
    return make(min(size, 5), split)


def never_called(split: str = "train", size: int = 100, seed: int = 0) -> list[Task]:
    raise AssertionError("a declared capacity below the size must refuse it before building")


never_called.capacity = lambda split, seed: 10  # type: ignore[attr-defined]


@declares_capacity(lambda split, seed, colours=("red", "green"): len(colours) if split == "train" else None)
def colour_tasks(split: str = "train", size: int = 100, seed: int = 0,
                 colours: tuple[str, ...] = ("red", "green")) -> list[Task]:
    """One task per colour in train; eval declares no bound."""
    return make(min(size, len(colours)) if split == "train" else size, split)


def refusing(split: str = "train", size: int = 100, seed: int = 0) -> list[Task]:
    raise ValueError(f"split must be train, got {split!r}")


refusing.capacity = lambda split, seed: 100  # type: ignore[attr-defined]


def bad_capacity(split: str = "train", size: int = 100, seed: int = 0) -> list[Task]:
    return make(size, split)


bad_capacity.capacity = lambda split, seed: "plenty"  # type: ignore[attr-defined]


def strict_capacity(split: str = "train", size: int = 100, seed: int = 0, **args: Any) -> list[Task]:
    return make(size, split)


strict_capacity.capacity = lambda split, seed: 10  # type: ignore[attr-defined]  # takes no args


@pytest.fixture(scope="module")
def plugins() -> Plugins:
    module = types.ModuleType("careless")

    def register_datasets(register: Any) -> None:
        for id, fn in [("x/few", few_tasks), ("x/never", never_called), ("x/colours", colour_tasks),
                       ("x/refusing", refusing), ("x/bad_capacity", bad_capacity),
                       ("x/strict_capacity", strict_capacity)]:
            register(id, fn)

    module.register_datasets = hookimpl(register_datasets)  # type: ignore[attr-defined]
    return Plugins(entry_points=False, extra=[("careless", module)])


@pytest.fixture(scope="module")
def base() -> Spec:
    return load_spec(CALCULATOR)


def with_data(spec: Spec, **splits: DatasetSpec) -> Spec:
    data = spec.data.model_copy(update={"dev": None, "eval": None, **splits})
    return spec.model_copy(update={"data": data})


def test_a_dataset_that_returns_fewer_tasks_than_asked_is_one_line(plugins: Plugins, base: Spec) -> None:
    ds = DatasetSpec(id="x/few", size=100)
    with pytest.raises(ValueError) as info:
        build_split(ds, "train", plugins)
    assert str(info.value) == "data.train: x/few returned 5 tasks, asked for 100"
    assert len(build_split(ds, "train", plugins, size=5)) == 5  # a caller asking for 5 gets them
    spec = with_data(base, train=ds, eval=DatasetSpec(id="x/few", split="eval", size=3))
    assert dataset_size_problems(spec, plugins) == ["data.train: x/few returned 5 tasks, asked for 100"]
    default = with_data(base, train=DatasetSpec(id="x/few"))  # no size: 100 tasks are asked for
    assert dataset_size_problems(default, plugins) == ["data.train: x/few returned 5 tasks, asked for 100"]


def test_a_declared_capacity_refuses_the_size_before_building(plugins: Plugins, base: Spec) -> None:
    ds = DatasetSpec(id="x/never", size=11)
    line = "data.train: x/never can produce at most 10 distinct train tasks, asked for 11"
    assert dataset_size_problems(with_data(base, train=ds), plugins) == [line]
    with pytest.raises(ValueError) as info:
        build_split(ds, "train", plugins)
    assert str(info.value) == line
    spec = with_data(base, train=DatasetSpec(id="x/colours", size=2),
                     dev=DatasetSpec(id="x/colours", size=4, seed=3, args={"colours": ["red", "green", "blue"]}),
                     eval=DatasetSpec(id="x/colours", split="eval", size=1000))
    assert dataset_size_problems(spec, plugins) == [
        'data.dev: x/colours can produce at most 3 distinct train tasks (colours=["red","green","blue"], seed=3), '
        "asked for 4"]
    assert len(build_split(spec.data.eval, "eval", plugins)) == 1000  # type: ignore[arg-type]


def test_a_capacity_or_builder_that_refuses_is_one_line_naming_the_split(plugins: Plugins, base: Spec) -> None:
    spec = with_data(base, train=DatasetSpec(id="x/refusing", split="dev", size=1),
                     eval=DatasetSpec(id="x/bad_capacity", size=1))
    assert dataset_size_problems(spec, plugins) == [
        "data.eval: x/bad_capacity: its capacity() returned 'plenty'; a dataset's capacity is a non-negative int or "
        "None"]
    with pytest.raises(ValueError, match=r"^data\.train: split must be train, got 'dev'$"):
        build_split(spec.data.train, "train", plugins)
    assert declared_capacity(few_tasks, DatasetSpec(id="x/few")) is None  # declaring none is fine
    strict = with_data(base, train=DatasetSpec(id="x/strict_capacity", size=5, args={"level": 2}))
    assert dataset_size_problems(strict, plugins) == [
        "data.train: x/strict_capacity: its capacity() failed: TypeError: <lambda>() got an unexpected keyword "
        "argument 'level'"]


def test_capacity_helpers() -> None:
    assert capacity_line("a/b", 3, "dev", 4, "k=v") == "a/b can produce at most 3 distinct dev tasks (k=v), asked for 4"
    assert seed_block_capacity(0, 1_000_000) == 1_000_000 and seed_block_capacity(9, 1_000_000) == 100_000
    with pytest.raises(ValueError, match="seed must be 0 or more"):
        seed_block_capacity(-1, 1_000_000)


def test_first_party_math_capacity_is_read_without_building(base: Spec) -> None:
    from agentbridge.plugins import get_plugins

    huge = with_data(base, train=DatasetSpec(id="math/arithmetic", size=10**6),
                     eval=DatasetSpec(id="math/arithmetic", split="eval", size=10**6, args={"two_step": False}))
    assert dataset_size_problems(huge, get_plugins()) == [
        "data.train: math/arithmetic can produce at most 468980 distinct train tasks (two_step=True), asked for "
        "1000000",
        "data.eval: math/arithmetic can produce at most 2394 distinct eval tasks (two_step=False), asked for 1000000"]
    assert dataset_size_problems(base, get_plugins()) == []


@pytest.mark.parametrize("size", ["1000000", "10000000"])
def test_a_huge_size_ends_compile_with_one_line_instead_of_hanging(tmp_path: Path, size: str) -> None:
    """Run in a child process with a timeout: a generator that loops again fails here instead of hanging."""
    cmd = [str(AGENTBRIDGE), "compile", str(CALCULATOR), "--set", f"data.train.size={size}", "-o",
           str(tmp_path / "job")]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"compile with data.train.size={size} did not end within 60 s")
    assert result.returncode == 1
    assert f"math/arithmetic can produce at most 468980 distinct train tasks (two_step=True), asked for {size}" in \
        result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_load_tasks_holds_a_generator_dataset_to_its_size(plugins: Plugins, base: Spec) -> None:
    from agentbridge.rollout.agent import load_tasks

    spec = with_data(base, train=DatasetSpec(id="x/few", size=100), eval=DatasetSpec(id="x/never", size=50))
    with pytest.raises(ValueError, match=r"^data\.train: x/few returned 5 tasks, asked for 100$"):
        load_tasks(spec, "train", plugins=plugins)
    assert len(load_tasks(spec, "train", size=5, plugins=plugins)) == 5
    with pytest.raises(ValueError, match=r"^data\.eval: x/never can produce at most 10 distinct train tasks, "):
        load_tasks(spec, "eval", plugins=plugins)


def test_validate_reports_a_size_above_capacity(tmp_path: Path) -> None:
    cmd = [str(AGENTBRIDGE), "validate", str(CALCULATOR), "--set", "data.dev.size=100000"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 1, result.stdout
    lines = result.stderr.strip().splitlines()
    assert lines == [f"error: {CALCULATOR}:27 (after --set data.dev.size=100000): data.dev: math/arithmetic can "
                     "produce at most 60264 distinct dev tasks (two_step=True), asked for 100000"], lines

"""A run's console output: ``say`` lines and progress bars (rich on a terminal; a line now and then in a log)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Update = Callable[[int, str, bool], None]   # (step, info, done)


def quiet_libraries() -> None:
    """Only the run's own progress: no library warnings, weight-loading bars or printed dicts."""
    from transformers.utils import logging as hf_logging

    warnings.filterwarnings("ignore", message=".*deprecated and will be removed in v6.*", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module=r"trl\..*")
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


class RunConsole:
    """``say(text)`` prints one line (a ``▸`` marks a phase); ``progress(label, total)`` adds a bar and returns its
    ``update(step, info, done)``. Outside a terminal (logs, pipes) a bar prints a line every ``every`` steps and at
    its end. Use as ``with console.bars(): ...`` around the work that updates bars."""

    def __init__(self, quiet: bool = False, every: dict[str, int] | None = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True, quiet=quiet)
        self.every = every or {}
        columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.fields[info]}"))
        self._bars = Progress(*columns, console=self.console, transient=False)

    def say(self, text: str) -> None:
        self.console.print(("[bold cyan]▸[/] " + text) if not text.startswith(" ") else text, highlight=False,
                           soft_wrap=True)

    @contextmanager
    def bars(self) -> Iterator[Any]:
        with self._bars as bars:
            yield bars

    def progress(self, label: str, total: int | None) -> Update:
        bar = self._bars.add_task(label, total=total, info="")
        every = self.every.get(label, 50)
        printed = {"step": -1}

        def update(step: int, info: str, done: bool = False) -> None:
            self._bars.update(bar, completed=step, info=info)
            if done:
                self._bars.update(bar, total=step)
                self._bars.stop_task(bar)
            if not self.console.is_terminal and (step % every == 0 or done) and step != printed["step"]:
                printed["step"] = step
                self.console.print(f"  {label} step {step}{'/' + str(total) if total else ''}  {info}",
                                   highlight=False, soft_wrap=True)
        return update

"""A backend's command line whose parser its program builds inline, under ``if __name__ == "__main__":``, so that it
cannot be imported: :func:`main_block` reads that block from the installed source and :func:`run_statements` runs
the part a validator wants (the real parser and its post-parse checks, not the program itself) on a job's argv."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import sys
from pathlib import Path
from typing import Any


class CommandLineRejected(ValueError):
    """The program's parser or one of its post-parse checks rejected the command line (one line)."""


def main_block(module: str, install: str, version: str) -> tuple[str, list[ast.stmt]]:
    """``(its source file, its statements)``: the ``__main__`` block of the installed ``module``. Raises
    :class:`CommandLineRejected` when the module is not installed (``install``: how to get it) or has no such block
    (``version``: the version the adapter is built for)."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:  # its package is not there
        spec = None
    if spec is None or spec.origin is None:
        raise CommandLineRejected(f"{module.split('.')[0]} is not installed in this interpreter; {install}")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in tree.body:
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and getattr(node.test.left, "id", "") == "__name__"):
            return spec.origin, node.body
    raise CommandLineRejected(f"{spec.origin} has no __main__ block; is this {version}?")


def run_statements(statements: list[ast.stmt], origin: str, argv: list[str], prog: str,
                   names: dict[str, Any]) -> dict[str, Any]:
    """Run ``statements`` of ``origin`` (from :func:`main_block`) as ``prog argv`` runs them, with ``names`` (what
    the module's own imports would give them) and their output swallowed; returns the names they set. Raises
    :class:`CommandLineRejected` with argparse's reason, or the first line of what a post-parse check raised."""
    code = compile(ast.Module(body=statements, type_ignores=[]), origin, "exec")
    namespace: dict[str, Any] = {"__name__": "__main__", **names}
    saved, sys.argv = sys.argv, [prog, *argv]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            exec(code, namespace)  # noqa: S102 - the backend's own parser code, from its installed package
    except SystemExit:  # argparse: usage + "error: ..." on stderr
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        message = lines[-1] if lines else "argparse rejected the command line"
        raise CommandLineRejected(message.split("error: ", 1)[-1]) from None
    except AssertionError as e:
        raise CommandLineRejected(str(e).strip().splitlines()[0] if str(e).strip() else "a post-parse assert failed "
                                  f"(line {_last_line(e)} of {Path(origin).name})") from None
    except (ValueError, TypeError, KeyError) as e:
        raise CommandLineRejected(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    finally:
        sys.argv = saved
    return namespace


def _last_line(e: BaseException) -> int:
    """The line the traceback of ``e`` ends at (where it was raised)."""
    tb, line = e.__traceback__, 0
    while tb is not None:
        line, tb = tb.tb_lineno, tb.tb_next
    return line

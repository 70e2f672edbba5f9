"""Run the conformance suite inside a backend package's own tests.

In a third-party backend's test module::

    from agentbridge.conformance.pytest_plugin import conformance_tests

    test_conformance = conformance_tests("mybackend")

This collects one test per golden case (``test_conformance[text-tools]``, ...); each fails with the lines that
say which field of which episode differs from agentbridge's driver. The backend runs once per kind. A field the
backend's default job does not hold (see :class:`~agentbridge.conformance.suite.SuiteResult`'s ``notes``) is a
:class:`ConformanceNote` warning, once per kind, in pytest's warnings summary.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import cache

import pytest

from agentbridge.conformance.golden import KINDS, cases
from agentbridge.conformance.suite import SuiteResult, run_suite


class ConformanceNote(UserWarning):
    """A field the backend's default job does not hold: checked under another job, or not at all."""


@cache
def suite_result(backend: str, kind: str) -> SuiteResult:
    """The suite's run of ``kind`` through ``backend`` that the plugin's tests share (run once per process): a
    backend's own tests read its records from here instead of running the kind again."""
    return run_suite(backend, (kind,))[0]


@cache
def _note(backend: str, kind: str) -> None:
    for line in suite_result(backend, kind).notes:
        warnings.warn(ConformanceNote(f"{kind}: {line}"), stacklevel=2)


def _names(line: str, case: str) -> bool:
    return f"case {case}:" in line or f"case {case}[" in line


def problems_of(result: SuiteResult, case: str) -> tuple[list[str], list[str]]:
    """``(the problems naming case, the problems naming no golden case of the kind)``; the second fail every
    case's test, so a suite that failed never lets all of its tests pass."""
    known = cases(result.kind)
    general = [p for p in result.problems if not any(_names(p, c) for c in known)]
    return [p for p in result.problems if _names(p, case)], general


def conformance_tests(backend: str, kinds: tuple[str, ...] = KINDS) -> Callable[[str, str], None]:
    """A parametrized pytest test running the golden episodes of ``kinds`` through ``backend``."""
    params = [pytest.param(kind, case, id=f"{kind}-{case}") for kind in kinds for case in cases(kind)]

    @pytest.mark.parametrize(("kind", "case"), params)
    def test(kind: str, case: str) -> None:
        result = suite_result(backend, kind)
        if result.skipped:
            pytest.skip(result.skipped)
        _note(backend, kind)
        mine, general = problems_of(result, case)
        assert not general and not mine, "\n".join(general + mine)

    test.__name__ = f"test_conformance_{backend}"
    return test

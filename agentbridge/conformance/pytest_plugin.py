"""Run the conformance suite inside a backend package's own tests.

In a third-party backend's test module::

    from agentbridge.conformance.pytest_plugin import conformance_tests

    test_conformance = conformance_tests("mybackend")

This collects one test per golden case (``test_conformance[text-tools]``, ...); each fails with the lines that
say which field of which episode differs from agentbridge's driver. The backend runs once per kind.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import pytest

from agentbridge.conformance.golden import KINDS, cases
from agentbridge.conformance.suite import SuiteResult, run_suite


@cache
def _result(backend: str, kind: str) -> SuiteResult:
    return run_suite(backend, (kind,))[0]


def conformance_tests(backend: str, kinds: tuple[str, ...] = KINDS) -> Callable[[str, str], None]:
    """A parametrized pytest test running the golden episodes of ``kinds`` through ``backend``."""
    params = [pytest.param(kind, case, id=f"{kind}-{case}") for kind in kinds for case in cases(kind)]

    @pytest.mark.parametrize(("kind", "case"), params)
    def test(kind: str, case: str) -> None:
        result = _result(backend, kind)
        if result.skipped:
            pytest.skip(result.skipped)
        general = [p for p in result.problems if " case " not in p]
        mine = [p for p in result.problems if f"case {case}:" in p or f"case {case}[" in p]
        assert not general and not mine, "\n".join(general + mine)

    test.__name__ = f"test_conformance_{backend}"
    return test

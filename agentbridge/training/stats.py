"""Statistics for held-out results: Wilson intervals, the exact McNemar test for paired arms' successes and the
Wilcoxon signed-rank test for their graded scores (reward components such as supporting-passage recall)."""

from __future__ import annotations

from collections.abc import Sequence


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a success rate; ``(0.0, 1.0)`` when ``n`` is 0."""
    if n == 0:
        return 0.0, 1.0
    from scipy.stats import binomtest

    ci = binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def mcnemar_exact(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Exact McNemar test of two arms scored on the same tasks (scores >= 0.5 count as success).

    Returns the discordant counts (``a_only``: tasks only ``a`` solved, ``b_only``) and the two-sided p-value of
    the exact binomial test on them (1.0 when no task differs).
    """
    if len(a) != len(b):
        raise ValueError(f"paired arms need the same tasks: {len(a)} vs {len(b)} scores")
    a_only = sum(x >= 0.5 > y for x, y in zip(a, b, strict=True))
    b_only = sum(y >= 0.5 > x for x, y in zip(a, b, strict=True))
    if a_only + b_only == 0:
        return {"a_only": 0.0, "b_only": 0.0, "p": 1.0}
    from scipy.stats import binomtest

    p = binomtest(a_only, a_only + b_only, 0.5, alternative="two-sided").pvalue
    return {"a_only": float(a_only), "b_only": float(b_only), "p": float(p)}


def wilcoxon_paired(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Wilcoxon signed-rank test of two arms' graded scores on the same tasks (tasks scored alike are dropped).

    Returns the mean difference ``a - b``, how many tasks differ, and the two-sided p-value (1.0 when none does).
    """
    if len(a) != len(b):
        raise ValueError(f"paired arms need the same tasks: {len(a)} vs {len(b)} scores")
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    differing = sum(d != 0 for d in diffs)
    mean_diff = sum(diffs) / len(diffs) if diffs else 0.0
    if differing == 0:
        return {"mean_diff": 0.0, "differing": 0.0, "p": 1.0}
    from scipy.stats import wilcoxon

    p = wilcoxon(diffs, zero_method="wilcox", alternative="two-sided").pvalue
    return {"mean_diff": float(mean_diff), "differing": float(differing), "p": float(p)}

"""What each backend's job will do, side by side: differences found in shared words only, drawn in the report and
checked in headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from agentbridge.compare.report import write_comparison
from agentbridge.compare.semantics import ASPECTS, aspect_difference_lines, differing, semantics_table

TRL = {"advantage": "r - group mean, / group std · scale_rewards group", "clip": "(0.2, 0.28) on token ratios",
       "optimizer": "lr 0.0001, constant after warmup · 10 warmup steps, constant_with_warmup"}
VERL = {"advantage": "r - group mean, / group std · adv_estimator grpo", "clip": "(0.2, 0.2) on token ratios",
        "optimizer": "lr 0.0001, constant after warmup · 10 warmup steps, constant"}


def test_only_the_shared_words_are_compared() -> None:
    both = {"trl": TRL, "verl": VERL}
    assert differing(both) == ["clip"]  # the backends' own names (after ·) never count
    assert aspect_difference_lines(both) == ["clip: trl (0.2, 0.28) on token ratios; verl (0.2, 0.2) on token ratios"]
    assert differing({"trl": TRL, "verl": TRL}) == [] and semantics_table({}) == ""


def test_the_report_highlights_what_differs_in_headless_chromium(tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is missing: run scripts/system-deps.sh"
    path, _ = write_comparison([], tmp_path / "out", semantics={"trl": TRL, "verl": VERL})
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=3000", "--dump-dom"]
    dom = subprocess.run([chromium, *flags, path.as_uri()], capture_output=True, text=True, timeout=120).stdout
    table = dom.split('<table class="semantics">')[1].split("</table>")[0]
    rows = re.findall(r"<tr( class=\"differs\")?><th[^>]*>([^<]+)</th>", table)
    assert [name for _, name in rows] == ["aspect", *ASPECTS]  # the header row, then one row per aspect
    assert [name for mark, name in rows if mark] == ["clip"]
    assert "1 aspect(s) differ" in dom and "clip: trl (0.2, 0.28) on token ratios; verl (0.2, 0.2)" in dom

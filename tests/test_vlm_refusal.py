"""A vision-language spec is refused, in one line naming who can, by a backend whose job feeds the model no images
(it would train on the image placeholders alone): at validate and at compile, with nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentbridge.backends import known_capabilities

TEXT_ONLY = sorted(name for name, caps in known_capabilities().items() if not caps.multimodal)
WITH_IMAGES = sorted(name for name, caps in known_capabilities().items() if caps.multimodal)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentbridge.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("backend", [b for b in ("roll", "slime", "rlinf") if b in TEXT_ONLY])
def test_compile_of_a_vlm_spec_for_a_text_only_backend_is_one_line(tmp_path: Path, backend: str) -> None:
    example = Path("examples/gui.gpu.yaml").resolve()
    out = tmp_path / "job"
    result = _cli("compile", str(example), "--backend", backend, "-o", str(out), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert f"vision-language model and {backend} feeds it no images" in line
    assert line.endswith(f"backends that can: {', '.join(WITH_IMAGES)}")
    assert "Traceback" not in result.stderr and not out.exists()


def test_validate_names_the_refusal_for_the_tiny_vlm(tmp_path: Path) -> None:
    if "roll" not in TEXT_ONLY:
        pytest.skip("the ROLL adapter is not installed here")
    example = Path("examples/gui.yaml").resolve()
    result = _cli("validate", str(example), "--set", "backend.name=roll", cwd=tmp_path)
    assert result.returncode == 1
    assert "model.path: builtin:tiny-vl is a vision-language model and roll feeds it no images" in result.stderr

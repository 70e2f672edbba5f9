"""The documentation: README.md stays short and holds the set-up commands, the MkDocs site builds with warnings as
errors, the generated spec reference covers every field (and every field has a description), every `agentbridge`
command in the docs parses with the real CLI (and the cheap ones run), every spec in the docs validates, and every
relative link to a repository file resolves."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MAX_README_LINES = 150

SETUP_COMMANDS = (
    "scripts/install.sh && .venv/bin/agentbridge train examples/calculator.yaml",  # the main job, CPU default
    "scripts/test.sh",  # every test suite
)
"""The two set-up commands for a fresh machine, verbatim: README.md and docs/quickstart.md show each as a bash block."""

SHELL_LANGS = {"bash", "sh", "shell", "console"}
RUN_COMMANDS = {"validate", "schema"}  # cheap enough to run in-process; every other command is parsed only
EXPECT_FAILURE = "# exits 1"  # a documented command that must fail says so in its comment


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = load_generator()


def doc_pages() -> list[Path]:
    """README.md and every hand-written page of the site (the generated reference/ is not hand-written)."""
    pages = [README, *sorted(DOCS.rglob("*.md"))]
    return [p for p in pages if "reference" not in p.relative_to(ROOT).parts[1:2]]


def code_blocks(path: Path) -> Iterator[tuple[str, str, int]]:
    """``(language, text, first line number)`` of every fenced code block in a Markdown file."""
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        match = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", lines[i])
        if not match:
            i += 1
            continue
        fence, lang, start = match.group(2), match.group(3).lower(), i + 1
        i += 1
        body = []
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        yield lang, "\n".join(body), start + 1


# ------------------------------------------------------------------------------------------------ README, set-up


def test_readme_is_short_and_holds_the_setup_commands() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; at most {MAX_README_LINES}"
    for page in (README, DOCS / "quickstart.md"):
        blocks = [text for lang, text, _ in code_blocks(page) if lang in SHELL_LANGS]
        for command in SETUP_COMMANDS:
            assert command in blocks, f"{page.relative_to(ROOT)}: no bash block that is exactly {command!r}"


def test_readme_backend_matrix_matches_the_backends() -> None:
    """README's matrix lists every first-party backend; each installed one's row is what its adapter declares."""
    from agentbridge.backends import known_capabilities, verification

    text = README.read_text()
    section = text[text.index("## Backend support"):]
    section = section[:section.index("\n## ")]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| backend")]
    caps = known_capabilities()
    listed = {row[0] for row in rows}
    first_party = {d.name for d in (ROOT / "adapters").iterdir() if (d / "pyproject.toml").is_file()}
    assert listed == first_party, f"README's matrix: {sorted(listed)}, the adapters: {sorted(first_party)}"
    yes = {True: "yes", False: "no"}
    for name, algorithms, vlm, turn_credit, serves, cpu, verified in rows:
        if name not in caps:  # only an installed adapter says what it runs
            continue
        c = caps[name]
        assert sorted(a.strip() for a in algorithms.split(",")) == sorted(c.algorithms), name
        assert (vlm, turn_credit, serves, cpu, verified) == (
            yes[c.multimodal], yes[c.turn_credit], yes[c.serves_reward_models], yes[c.cpu_training],
            verification(c)[0]), name


def test_relative_links_to_repository_files_resolve() -> None:
    problems = []
    for page in doc_pages():
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # links inside code are not links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:|^#", target):
                continue
            resolved = (page.parent / target.split("#")[0]).resolve()
            inside_docs = resolved.is_relative_to(DOCS)
            if page == README or not inside_docs:  # links inside the site are checked by mkdocs --strict
                if not resolved.exists():
                    problems.append(f"{page.relative_to(ROOT)}: {target}")
                elif page != README and not inside_docs:
                    problems.append(f"{page.relative_to(ROOT)}: {target} leaves docs/ (mkdocs cannot serve it)")
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------------------------------------ the site


def test_site_builds_strictly(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed (scripts/test.sh installs them)")
    shutil.copytree(DOCS, tmp_path / "docs", ignore=shutil.ignore_patterns("reference", "__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    # a process of its own: the plugins it documents are the installed ones, not what other tests registered here
    done = subprocess.run([sys.executable, str(DOCS / "gen_reference.py"), "--docs", str(tmp_path / "docs")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for page in gen.PAGES:
        assert (tmp_path / "docs" / "reference" / page).stat().st_size > 0, page
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    assert (tmp_path / "site" / "reference" / "spec.html").is_file()


# ------------------------------------------------------------------------------------------------ spec reference


def model_fields(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every field of a pydantic model and of the models it holds, as dotted paths (lists as ``[]``)."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path
        nested = [(field.annotation, path)]
        while nested:
            annotation, at = nested.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                yield from model_fields(annotation, f"{at}.")
            elif typing.get_origin(annotation) is list:
                nested += [(a, f"{at}[]") for a in typing.get_args(annotation)]
            else:
                nested += [(a, at) for a in typing.get_args(annotation)]


def test_spec_reference_lists_every_field() -> None:
    from agentbridge.spec import Spec

    fields = list(model_fields(Spec))
    walked = [path for path, _, _ in gen.iter_fields(gen.spec_schema())]
    assert sorted(walked) == sorted(fields), "the JSON Schema walk and the pydantic models disagree"
    page = gen.spec_page()
    missing = [path for path in fields if f"| `{path}` |" not in page]
    assert not missing, f"fields missing from the spec reference: {missing}"


def test_every_spec_field_has_a_description() -> None:
    undescribed = set(gen.undescribed_fields())
    assert not undescribed, ("spec fields without a description (Field(description=...) in "
                             "agentbridge/spec/schema.py): " + ", ".join(sorted(undescribed)))


# ------------------------------------------------------------------------------------------------ commands


def agentbridge_commands() -> Iterator[tuple[str, list[str], str]]:
    """``(where, argv after 'agentbridge', the line)`` of every `agentbridge` command in a shell block."""
    for page in doc_pages():
        for lang, text, first in code_blocks(page):
            if lang not in SHELL_LANGS:
                continue
            for offset, line in enumerate(text.splitlines()):
                lexer = shlex.shlex(line.removeprefix("$ "), posix=True, punctuation_chars=True)
                lexer.whitespace_split = True
                tokens = list(lexer)
                segment: list[str] = []
                for token in [*tokens, ";"]:
                    if token not in ("&&", "||", "|", ";", "&"):
                        segment.append(token)
                        continue
                    redirect = [i for i, t in enumerate(segment) if t in (">", ">>", "<")]
                    segment = segment[:redirect[0]] if redirect else segment  # `> spec.schema.json`
                    if segment and Path(segment[0]).name == "agentbridge":
                        yield f"{page.relative_to(ROOT)}:{first + offset}", segment[1:], line
                    segment = []


def resolve(argv: list[str]) -> tuple[click.Command, list[str], list[str]]:
    """The command ``argv`` names, its own arguments and its path (``['backends', 'setup']``)."""
    command: click.Command = gen.cli_group()
    path: list[str] = []
    while isinstance(command, click.Group) and argv and not argv[0].startswith("-"):
        if argv[0] not in command.commands:
            raise click.UsageError(f"no such command {' '.join([*path, argv[0]])!r}")
        command, path, argv = command.commands[argv[0]], [*path, argv[0]], argv[1:]
    return command, argv, path


def test_documented_commands_parse_and_the_cheap_ones_run(monkeypatch: pytest.MonkeyPatch) -> None:
    commands = list(agentbridge_commands())
    assert len(commands) >= 20, "the docs' shell blocks were not read"
    from agentbridge.plugins import get_plugins
    from agentbridge.spec import SpecError, load_spec

    registries = get_plugins().registries
    monkeypatch.chdir(ROOT)
    runner = CliRunner()
    problems, ran = [], set()
    for where, argv, line in commands:
        try:
            command, args, path = resolve(argv)
            try:
                params = command.make_context(" ".join(["agentbridge", *path]), list(args)).params
            except click.BadParameter as e:  # a path the example names need not exist here (jobs/calc-verl)
                if not isinstance(getattr(e.param, "type", None), click.Path):
                    raise
                params = {}
        except click.ClickException as e:
            problems.append(f"{where}: agentbridge {shlex.join(argv)}: {e.format_message()}")
            continue
        if params.get("spec_path") and EXPECT_FAILURE not in line:  # the spec and its --set, checked as the CLI does
            try:
                load_spec(params["spec_path"], list(params.get("sets") or ()), registries=registries)
            except (SpecError, FileNotFoundError) as e:
                problems.append(f"{where}: agentbridge {shlex.join(argv)}: {e}")
        if path and path[0] in RUN_COMMANDS and tuple(argv) not in ran:
            ran.add(tuple(argv))
            result = runner.invoke(gen.cli_group(), argv)
            expected = 1 if EXPECT_FAILURE in line else 0
            if result.exit_code != expected:
                problems.append(f"{where}: agentbridge {shlex.join(argv)} exited {result.exit_code}, expected "
                                f"{expected}: {result.output.strip()[-500:]}")
    assert ran, "no validate/schema command in the docs was run"
    assert not problems, "\n".join(problems)


def test_a_renamed_flag_fails_the_parse() -> None:
    """The check above catches a documented flag the CLI no longer has (and one it still has passes)."""
    command, args, path = resolve(["compile", "examples/calculator.yaml", "--backend", "trl"])
    command.make_context("agentbridge compile", args)
    with pytest.raises(click.NoSuchOption):
        command, args, _ = resolve(["compile", "examples/calculator.yaml", "--backnd", "trl"])
        command.make_context("agentbridge compile", args)


# ------------------------------------------------------------------------------------------------ specs


def merged(base: Any, fragment: Any) -> Any:
    """``fragment`` laid over ``base``: mappings merge key by key, anything else replaces."""
    if isinstance(base, dict) and isinstance(fragment, dict):
        return {**base, **{k: merged(base.get(k), v) for k, v in fragment.items()}}
    return fragment


def test_documented_specs_validate() -> None:
    from agentbridge.plugins import get_plugins
    from agentbridge.spec import SpecError, parse_spec

    base = yaml.safe_load((ROOT / "examples" / "calculator.yaml").read_text())
    registries = get_plugins().registries
    problems, checked = [], 0
    for page in doc_pages():
        for lang, text, first in code_blocks(page):
            if lang not in ("yaml", "yml"):
                continue
            data = yaml.safe_load(text)
            assert isinstance(data, dict), f"{page.relative_to(ROOT)}:{first}: a YAML block that is not a mapping"
            whole = "name" in data and "environment" in data
            source = f"{page.relative_to(ROOT)}:{first}" + ("" if whole else " (laid over examples/calculator.yaml)")
            try:
                parse_spec(data if whole else merged(base, data), source=source, registries=registries)
            except SpecError as e:
                problems.append(str(e))
            checked += 1
    assert checked >= 5, "the docs' YAML blocks were not read"
    assert not problems, "\n".join(problems)


def test_readme_environment_table_names_registered_ids() -> None:
    """Every plugin id in README's "Bring your environment" table is one `agentbridge plugins` lists."""
    import re

    from agentbridge.plugins import get_plugins

    text = README.read_text()
    section = text[text.index("## Bring your environment"):]
    section = section[:section.index("\n## ")]
    ids = {found for found in re.findall(r"`([a-z_]+/[a-z_]+)`", section) if not found.startswith("plugins/")}
    assert {"verifiers/env", "gem/env", "skyrl/env", "openenv/remote"} <= ids, ids
    plugins = get_plugins()
    known = {name for kind in ("environments", "datasets", "rewards") for name in plugins.registries[kind].ids()}
    assert ids <= known, f"README names ids no plugin registers: {sorted(ids - known)}"

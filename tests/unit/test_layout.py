"""The package reads like the pipeline: one subpackage per stage, imports only point backwards.

A stage may import the shell (top-level modules) and stages before it in STAGES; the shell imports
no stage; `commands/` (the CLI layer) may import anything. Imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "verlenv"
# DESIGN.md's pipeline order; `inside` (doctor, clean, config lint) reads the image's manifest.
STAGES = ("profiles", "lock", "wheels", "verify", "image", "inside", "accept", "release")
LAYER = "commands"
MAX_TOP_LEVEL_MODULES = 8


def imported_verlenv_parts(source: str) -> set[str]:
    """The first component below `verlenv` of every verlenv module this source imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = node.module.split(".")
            if names[0] == "verlenv":
                found |= {names[1]} if len(names) > 1 else {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("verlenv.")}
    return found


def violations(package: Path) -> list[str]:
    """'importer -> imported' for every import that points forward in the pipeline."""
    rank = {stage: index for index, stage in enumerate(STAGES)}
    found = []
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package).parts[0].removesuffix(".py")
        if where == LAYER:
            continue
        for target in imported_verlenv_parts(path.read_text()):
            if target not in rank or target == where:
                continue  # the shell, or the stage itself
            if where not in rank or rank[target] > rank[where]:
                found.append(f"{path.relative_to(package)} imports verlenv.{target}")
    return found


def test_stages_import_only_earlier_stages_and_the_shell() -> None:
    assert violations(PACKAGE) == []


def test_every_subpackage_is_a_known_stage_or_the_cli_layer() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders == {*STAGES, LAYER}


def test_a_forward_import_is_caught(tmp_path: Path) -> None:
    fake = tmp_path / "verlenv"
    for stage in ("lock", "release"):
        (fake / stage).mkdir(parents=True)
        (fake / stage / "__init__.py").write_text("")
    (fake / "lock" / "resolve.py").write_text("def f():\n    from verlenv.release.publish import publish\n")
    (fake / "paths.py").write_text("from verlenv.lock import resolve\n")
    assert violations(fake) == ["lock/resolve.py imports verlenv.release", "paths.py imports verlenv.lock"]


def test_few_top_level_modules() -> None:
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, modules

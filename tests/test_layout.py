"""The package's layout: no import circle (counting imports inside functions), no module over 600
lines, one level of subpackages, the fine-tuned folder read through its format, one GPU marker."""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "electra"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found & modules


def test_no_import_circle():
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {m: imports(p, set(paths)) - {m} for m, p in paths.items()}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError(
                "import circle: " + " -> ".join([*path[path.index(module) :], module])
            )
        if module in done:
            return
        for dep in sorted(graph[module]):
            visit(dep, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


def test_no_module_over_600_lines():
    """Modules stay short enough to read: a module past 600 lines is doing several jobs."""
    long = {
        str(p.relative_to(PACKAGE.parent)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600
    }
    assert not long, f"split these modules: {long}"


def test_the_tree_is_one_level_of_subpackages():
    """Modules sit in one subpackage per step of the data flow (docs/architecture.md); only the
    few that every step shares stay at the top, and only a family's folder sits deeper."""
    top = {p.name for p in PACKAGE.glob("*.py")}
    shared = {
        "errors",
        "atomic",
        "locks",
        "jsonl",
        "config",
        "overrides",
        "settings",
        "api",
    }
    assert top <= {"__init__.py", *(f"{name}.py" for name in shared)}
    # ... except the architecture families, one folder each below electra/model/
    # (docs/architecture.md §Adding a family).
    deeper = [p for p in PACKAGE.glob("*/*/*.py") if p.parent.parent != PACKAGE / "model"]
    assert not deeper, "subpackages are one level deep"
    assert not list(PACKAGE.glob("*/*/*/*.py")), "a family's folder has no subfolder"


def test_gpu_only_tests_carry_the_one_marker():
    """A GPU-only test says so with `@pytest.mark.gpu` (conftest.py skips those without CUDA),
    never with its own skip condition, so `pytest -m gpu` runs them all on the GPU machine."""
    tests = Path(__file__).resolve().parent
    own = [
        p.name
        for p in tests.glob("*.py")
        if re.search(r"skipif\([^)]*cuda", p.read_text(encoding="utf-8"))
    ]
    assert not own, f"use @pytest.mark.gpu in {own}"


def test_predict_evaluate_and_export_know_the_format_not_the_recipe():
    """`predict`, `evaluate` and the hf/ modules read a fine-tuned folder through its format
    (`electra.folders.finetuned`), never through the fine-tuning recipe (its loop and its seeds)."""
    recipe = {"electra.finetuning.run", "electra.finetuning.loop"}
    readers = [
        PACKAGE / "finetuning" / "predict.py",
        PACKAGE / "finetuning" / "evaluate.py",
        *(PACKAGE / "hf").glob("*.py"),
    ]
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    leaks = {module_name(p): imports(p, modules) & recipe for p in readers}
    assert not {m: r for m, r in leaks.items() if r}


def test_lower_layers_import_nothing_above_them():
    """errors, atomic, locks, config, data/ and model/ are what every command
    stands on: none of them imports a layer above (the engine, objectives, tasks, fine-tuning,
    Hugging Face, recipes, the CLI, the API)."""
    lower = ("electra.errors", "electra.atomic", "electra.locks", "electra.config")
    lower += ("electra.model.configs", "electra.data", "electra.model")
    upper = ("engine", "objectives", "tasks", "finetuning", "hf", "recipes", "cli", "api")
    upper = tuple(f"electra.{name}" for name in upper)
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    found = {
        name: sorted(m for m in imports(path, set(modules)) if m.startswith(upper))
        for name, path in modules.items()
        if name.startswith(lower)
    }
    assert not {name: up for name, up in found.items() if up}

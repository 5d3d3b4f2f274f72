"""The package's layout: no import circle (counting imports inside functions), every import down
the layers of packages, no module over 600 lines, one level of subpackages, the fine-tuned folder
read through its format, one GPU marker."""

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
        for p in tests.rglob("*.py")
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


# The packages from the bottom up (docs/architecture.md §Layers); a top-level module is a package
# of its own. A module imports from its own package and those before it, never one after.
LAYERS = (
    "errors",
    "atomic",
    "locks",
    "jsonl",
    "overrides",
    "data",
    "model",
    "config",
    "tasks",
    "objectives",
    "engine",
    "folders",
    "hf",
    "scoring",
    "pretraining",
    "finetuning",
    "probing",
    "recipes",
    "api",
    "cli",
)


def package_of(module: str) -> str | None:
    """The layer of `electra.<package>...`; None for `electra` itself (`__init__` names the API
    lazily, by strings) and for what is not ours."""
    parts = module.split(".")
    return parts[1] if parts[0] == "electra" and len(parts) > 1 else None


def imported(node: ast.AST) -> list[str]:
    """The modules an import statement names (`from electra import x` names `electra.x`), and
    those a family's record or a hook imports on first use by name (`Ref("electra.x", ...)`,
    `import_module("electra.x")`)."""
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        called = getattr(node.func, "id", getattr(node.func, "attr", ""))
        name = node.args[0].value
        if called in ("Ref", "import_module") and str(name).startswith("electra."):
            return [name]
        return []
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module:
        if node.module == "electra":
            return [f"electra.{alias.name}" for alias in node.names]
        return [node.module]
    return []


def test_every_package_has_its_layer():
    """A new package or top-level module gets its place in LAYERS, so none escapes the check."""
    packages = {package_of(module_name(p)) for p in PACKAGE.rglob("*.py")} - {None}
    assert packages <= set(LAYERS), f"give these a place in LAYERS: {packages - set(LAYERS)}"
    assert len(set(LAYERS)) == len(LAYERS)


def test_imports_go_down_the_layers():
    """Every import, at the top of a module, inside a function or under TYPE_CHECKING, is of the
    module's own package or one below it in LAYERS, so that packages never import each other in a
    loop (finetuning -> hf -> finetuning) even where no two modules do: errors, atomic, locks,
    config, data/ and model/ stand under the engine, the folder formats, Hugging Face, fine-tuning,
    the recipes, the API and the CLI, and know none of them."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = package_of(module_name(path))
        if own is None:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for target in imported(node):
                other = package_of(target)
                if other in rank and rank[other] > rank[own]:
                    where = path.relative_to(PACKAGE.parent)
                    upward.append(f"{where}:{node.lineno} ({own}) imports {target} ({other})")
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(upward)

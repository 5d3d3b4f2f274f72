"""Outside `electra/model/`, no code names an architecture family: objectives, the engine,
fine-tuning, export, loading and the CLI ask a run's family record (`electra.model.family`), so a
new family is a folder and a line (docs/architecture.md §Adding a family;
tests/model/test_third_family.py runs one declared in a test file alone).

An AST scan of `electra/` outside `electra/model/` flags:
- a name, attribute, import or whole string literal that is a class of a registered family (its
  folder's classes and its record's) or one of its Hugging Face class names;
- an import of a family's folder (`electra.model.<family>`, any subpackage of `electra/model/`);
- a family chosen by a literal: `arch` or `model_type` compared with a string literal
  (`cfg.arch == "..."`, `config["model_type"] in (...)`), given one (`arch="..."`,
  `{"model_type": "..."}`, `.get("model_type", "...")`), or a registered family's name passed to
  a function that looks a family up (`family("...")`, `with_arch(cfg, "...")`).

The objective named "electra" and the command's name "electra" are not families and are not
flagged (`test_the_scan_flags_what_names_a_family_and_nothing_else`)."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from pathlib import Path

import electra.model
from electra.model.family import families
from electra.model.hf_names import hf_names

ROOT = Path(electra.model.__file__).resolve().parents[1]  # electra/
MODEL = ROOT / "model"
SELECTORS = ("arch", "model_type")  # the fields a config names its family by
LOOKUPS = ("family", "arch")  # a function whose name holds one of these looks a family up


@dataclass(frozen=True)
class Known:
    """What names a family: its class names, its names, and the folders below electra/model/."""

    classes: frozenset[str]
    names: frozenset[str]
    packages: frozenset[str]


def family_classes(found) -> set[str]:
    """The public classes of a family's folder and of its record, and its Hugging Face names."""
    classes = {found.config, found.encoder, found.masked_lm, found.pretraining, found.layer}
    classes |= set(found.heads.values())
    named = {cls.__name__ for cls in classes}
    folder = Path(inspect.getfile(found.config)).parent
    if folder.parent == MODEL:  # a built-in family: every class its folder defines
        for file in folder.glob("*.py"):
            for node in ast.walk(ast.parse(file.read_text())):
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    named.add(node.name)
    for hf in hf_names(found):  # one per model type the family runs
        named |= {hf.discriminator, hf.generator, hf.encoder, hf.discriminator_as}
        named |= {h.hf_class for h in hf.heads} | {h.ours for h in hf.heads}
    return named - {""}


def known() -> Known:
    registered = families()
    packages = {m.name for m in pkgutil.iter_modules([str(MODEL)]) if m.ispkg}
    classes = set().union(*(family_classes(f) for f in registered.values()))
    names = {f.name for f in registered.values()}
    names |= {hf.model_type for f in registered.values() for hf in hf_names(f)}
    return Known(frozenset(classes), frozenset(names), frozenset(packages))


def _is_selector(node: ast.AST) -> bool:
    """`x.arch`, `arch`, `raw["model_type"]`, `raw.get("model_type", ...)`."""
    if isinstance(node, ast.Attribute):
        return node.attr in SELECTORS
    if isinstance(node, ast.Name):
        return node.id in SELECTORS
    if isinstance(node, ast.Subscript):
        return _literal(node.slice) in SELECTORS
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "get" and bool(node.args) and _literal(node.args[0]) in SELECTORS
    return False


def _literal(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _literals(node: ast.AST) -> list[str]:
    """The string literals of a literal or a tuple, list or set of them."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [v for e in node.elts if (v := _literal(e)) is not None]
    return [v] if (v := _literal(node)) is not None else []


def _callee(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _imports(node: ast.AST, packages: frozenset[str]) -> list[str]:
    """The family folders an import statement reaches into."""
    if isinstance(node, ast.Import):
        modules = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    else:
        return []
    parts = [m.split(".") for m in modules]
    return [
        ".".join(p[:3])
        for p in parts
        if p[:2] == ["electra", "model"] and p[2:3] and p[2] in packages
    ]


def scan(source: str, k: Known) -> list[tuple[int, str]]:
    """(line, what) for each place in `source` that names a family."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        for module in _imports(node, k.packages):
            hits.append((line, f"imports the family folder {module}"))
        if isinstance(node, ast.Name) and node.id in k.classes:
            hits.append((line, f"names the family class {node.id}"))
        elif isinstance(node, ast.Attribute) and node.attr in k.classes:
            hits.append((line, f"names the family class {node.attr}"))
        elif isinstance(node, ast.alias) and node.name.split(".")[-1] in k.classes:
            hits.append((line, f"imports the family class {node.name}"))
        elif _literal(node) in k.classes:
            hits.append((line, f"spells the family class {node.value!r}"))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(map(_is_selector, sides)) and any(_literals(s) for s in sides):
                hits.append((line, "compares arch/model_type with a literal"))
        elif isinstance(node, ast.Call):
            hits.extend((line, m) for m in _call_hits(node, k))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if key is not None and _literal(key) in SELECTORS and _literal(value) is not None:
                    hits.append((line, f"gives {key.value}={value.value!r}"))
    return sorted(set(hits))


def _call_hits(node: ast.Call, k: Known) -> list[str]:
    hits = []
    for kw in node.keywords:
        if kw.arg in SELECTORS and _literal(kw.value) is not None:
            hits.append(f"gives {kw.arg}={kw.value.value!r}")
    if _is_selector(node) and len(node.args) > 1 and _literal(node.args[1]) is not None:
        hits.append(f"defaults {node.args[0].value} to {node.args[1].value!r}")
    callee = _callee(node).lower()
    if any(word in callee for word in LOOKUPS):
        for arg in node.args:
            if _literal(arg) in k.names:
                hits.append(f"looks up the family {arg.value!r} by name")
    return hits


def test_no_code_outside_electra_model_names_a_family():
    k = known()
    assert {"electra", "modernbert"} <= k.names  # the built-in families are found
    found = []
    for file in sorted(ROOT.rglob("*.py")):
        if MODEL in file.parents:
            continue
        for line, what in scan(file.read_text(), k):
            found.append(f"{file.relative_to(ROOT.parent)}:{line}: {what}")
    assert not found, f"{len(found)} places name a family:\n" + "\n".join(found)


BAD = """
from electra.model.modernbert.config import ModernConfig
from electra.model import electra as family_folder
import electra.model.electra.modeling
if isinstance(cfg, ModernConfig) or cfg.arch == "modernbert": pass
if config["model_type"] in ("electra", "modernbert"): pass
model_type = raw.get("model_type", "electra")
head = heads["ElectraForSequenceClassification"]
cfg = replace(cfg, arch="modernbert")
config = {"model_type": "modernbert"}
found = family("modernbert")
"""

GOOD = """
from electra.model.family import family_of
from electra.model.configs import with_arch
parser = argparse.ArgumentParser(prog="electra")
@register("electra")
class ReplacedTokenDetection: pass
OBJECTIVE_NAMES = ("electra", "electra15", "mlm")
objective = replace(o, name="electra")
if cfg.objective.name == "electra": pass
cls = family_of(cfg).pretraining
names = {f.name: f for f in families().values()}
"""


def test_the_scan_flags_what_names_a_family_and_nothing_else():
    k = known()
    assert scan(GOOD, k) == []
    lines = {line for line, _ in scan(BAD, k)}
    assert lines == set(range(2, 12)), scan(BAD, k)


def test_a_registered_family_s_classes_are_known():
    module = importlib.import_module("electra.model.modernbert")
    classes = family_classes(module.FAMILY)
    assert {"ModernConfig", "ModernBertForPreTraining", "ModernBertEmbeddings"} <= classes
    assert "ModernBertForTokenClassification" in classes  # its discriminator's HF class

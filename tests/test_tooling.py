"""The suite is reproducible on a new machine: the test and lint tools are pinned, and CI runs the
README's own test command in a fresh virtual environment."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def dev_requirements() -> list[str]:
    if sys.version_info < (3, 11):
        pytest.skip("tomllib needs Python 3.11")
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return project["optional-dependencies"]["dev"]


@pytest.mark.parametrize("tool", ["pytest", "ruff"])
def test_the_test_and_lint_tools_are_pinned(tool):
    """A new pytest or ruff release upstream cannot change what CI runs."""
    pins = [r for r in dev_requirements() if re.match(rf"{tool}\b", r)]
    assert len(pins) == 1 and re.fullmatch(rf"{tool}==[\d.]+", pins[0]), pins


def test_ci_runs_the_readme_test_command_in_a_new_venv():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = re.search(r"Run the tests.*?```bash\n(.+?)\n```", readme, re.S).group(1)
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert command in script
    venv = script.index("-m venv")
    assert venv < script.index("bin/activate") < script.index(command)

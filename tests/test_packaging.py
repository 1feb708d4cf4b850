"""pyproject.toml lists every package (setuptools' find cannot apply the folder -> `lagwatch.*` mapping)."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).parent.parent
MAPPING = {
    "lagwatch": "lagwatch",
    "shared": "lagwatch.shared",
    "services": "lagwatch.services",
    "spark": "lagwatch.spark",
}


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for folder, package in MAPPING.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *relative.parts]))
    assert found == listed

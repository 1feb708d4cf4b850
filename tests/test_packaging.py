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
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _package_folders() -> dict[str, Path]:
    """Every folder that ships: Python packages and the folders of data files (schemas, static)."""
    found = {}
    for folder, package in MAPPING.items():
        for path in [ROOT / folder, *(ROOT / folder).rglob("*")]:
            if not path.is_dir() or path.name == "__pycache__" or path.name.endswith(".egg-info"):
                continue
            if not any(child.is_file() and child.suffix != ".pyc" for child in path.iterdir()):
                continue
            relative = path.relative_to(ROOT / folder)
            found[".".join([package, *relative.parts])] = path
    return found


def test_every_package_folder_is_listed_in_pyproject():
    assert set(_package_folders()) == set(SETUPTOOLS["packages"])


def test_every_folder_of_data_files_is_declared_as_package_data():
    data_folders = {name for name, path in _package_folders().items() if not (path / "__init__.py").exists()}
    assert data_folders == set(SETUPTOOLS["package-data"])

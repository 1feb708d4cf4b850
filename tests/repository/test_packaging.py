"""pyproject.toml lists every package (setuptools' find cannot apply the folder -> `lagwatch.*` mapping)."""

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests import paths

pytestmark = pytest.mark.slow  # it builds and installs the wheel

ROOT = paths.ROOT
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


DEV_ONLY = {"lagwatch.devkit"}  # the dev kit: in a checkout's editable install, in no wheel or image


def test_every_package_folder_is_listed_in_pyproject_but_the_dev_kit():
    assert set(_package_folders()) - DEV_ONLY == set(SETUPTOOLS["packages"])
    assert not DEV_ONLY & set(SETUPTOOLS["packages"])


def test_the_wheel_ships_every_service_and_not_the_dev_kit(tmp_path):
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = tmp_path.glob("lagwatch-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "lagwatch/cli.py" in names and "lagwatch/services/ingest/service.py" in names
    assert "lagwatch/shared/statuses/rules.py" in names and "lagwatch/shared/events/schemas/status_event.json" in names
    assert not [n for n in names if n.startswith("lagwatch/devkit/")]


def test_every_folder_of_data_files_is_declared_as_package_data():
    data_folders = {name for name, path in _package_folders().items() if not (path / "__init__.py").exists()}
    assert data_folders == set(SETUPTOOLS["package-data"])


def test_installing_prints_no_warning(tmp_path):
    """`pip install -e .` (what `make test` runs) in a fresh virtual environment, with the newest pip (which shows the
    build backend's warnings), prints no warning: the packages and their data are declared as setuptools expects, and
    the layout needs no import hook. (pip and setuptools come from the package index, as on any machine.)"""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    upgrade = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--upgrade", "pip"]
    subprocess.run(upgrade, check=True, capture_output=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    done = subprocess.run(
        [*pip, "--no-deps", "-e", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    # this machine's pip configuration names a local index folder that may be missing: pip's own notice, not a build's
    output = "\n".join(
        line for line in output.splitlines() if "is ignored: it is neither a file nor a directory" not in line
    )
    assert done.returncode == 0, output
    assert "Successfully installed lagwatch" in output
    assert "warning" not in output.lower(), output
    imported = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import lagwatch.shared.statuses.rules as m; print(m.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(imported.stdout.strip()).resolve() == ROOT / "shared" / "statuses" / "rules.py"

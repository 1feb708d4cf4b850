"""`make lint`'s type check: mypy over the `lagwatch` namespace, configured in pyproject.toml ([tool.mypy]).

The repository's folders are mapped onto one namespace (shared/ -> lagwatch.shared, services/ ->
lagwatch.services, spark/ -> lagwatch.spark), which mypy cannot follow through an editable install's import
hook. So this builds that namespace as a tree of symbolic links and checks it, printing the repository's paths.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAPPED = {"shared": "shared", "services": "services", "spark": "spark"}  # lagwatch.<name> -> folder


def build_tree(tree: Path) -> Path:
    """`tree`/lagwatch: the entries of lagwatch/ and the mapped folders, as links; returns that package."""
    package = tree / "lagwatch"
    package.mkdir(parents=True, exist_ok=True)
    wanted = {entry.name: entry for entry in (ROOT / "lagwatch").iterdir() if entry.name != "__pycache__"}
    wanted.update({name: ROOT / folder for name, folder in MAPPED.items()})
    for link in package.iterdir():
        if link.name not in wanted or link.resolve() != wanted[link.name]:
            link.unlink()
    for name, target in wanted.items():
        if not (package / name).is_symlink():
            (package / name).symlink_to(target)
    return package


def repository_paths(report: str) -> str:
    """mypy names the linked files lagwatch/shared/...; a reader wants shared/..."""
    for name, folder in MAPPED.items():
        report = report.replace(f"lagwatch/{name}/", f"{folder}/")
    return report


def main() -> int:
    tree = ROOT / ".mypy_cache" / "namespace"
    build_tree(tree)
    # Run inside the tree, so `lagwatch` resolves to it (not to the repository's own lagwatch/ folder).
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")]
    command += ["--cache-dir", str(ROOT / ".mypy_cache"), *sys.argv[1:]]
    result = subprocess.run(command, cwd=tree, capture_output=True, text=True, check=False)
    sys.stdout.write(repository_paths(result.stdout))
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())

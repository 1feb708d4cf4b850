"""`make lint`'s type check: mypy over the `lagwatch` package, configured in pyproject.toml ([tool.mypy]).

lagwatch/shared, lagwatch/services and lagwatch/spark are symbolic links to the repository's folders, so mypy reads
the package as it is installed; this prints the repository's paths (shared/..., not lagwatch/shared/...).
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINKED = ("shared", "services", "spark")  # lagwatch/<name> -> <name>/


def repository_paths(report: str) -> str:
    """mypy names the files lagwatch/shared/...; a reader wants shared/..."""
    for name in LINKED:
        report = report.replace(f"lagwatch/{name}/", f"{name}/")
    return report


def main() -> int:
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *sys.argv[1:]]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    sys.stdout.write(repository_paths(result.stdout))
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())

"""The last lines of a local server's log, quoted when it fails to start or dies."""

from pathlib import Path


def log_tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "<no log>"

"""Where things are, for tests in any folder: the repository's root and the tests' data files."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
DOCS = ROOT / "docs"

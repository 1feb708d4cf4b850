"""The documentation keeps up with the code: every configuration option is in docs/configuration.md with its
environment variable and default, and the README's and docs' links to files in the repository resolve."""

import importlib.util
import re
import subprocess
import sys

import pytest

from lagwatch.shared.runtime.config import ConfigError, load_config
from tests import paths

ROOT = paths.ROOT
DOCS = ROOT / "docs"


def config_reference():
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "scripts" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def documented_rows() -> dict[str, list[str]]:
    """key -> the other cells of its row, from the tables of docs/configuration.md."""
    rows = {}
    for line in (DOCS / "configuration.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.fullmatch(r"`[a-z<>\[\].-]+`", cells[0]):
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_every_option_is_documented_with_its_environment_variable_and_default():
    rows = documented_rows()
    options = config_reference().options()
    assert len(options) > 80
    missing = [o.key for o in options if o.key not in rows]
    assert not missing, f"not in docs/configuration.md (run python scripts/config_reference.py): {missing}"
    for o in options:
        env, default, meaning = rows[o.key]
        assert env == (f"`{o.env}`" if o.env else "— (file or api)"), o.key
        assert default == o.default, f"{o.key}: documented default {default}, the code's is {o.default}"
        assert meaning, o.key
    stale = sorted(set(rows) - {o.key for o in options})
    assert not stale, f"documented but not options any more: {stale}"


def test_the_table_is_what_the_script_writes_from_the_code():
    """A meaning edited in the doc alone drifts from the script's and is lost at the next regeneration."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "config_reference.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_the_documented_environment_variables_set_the_options():
    """Each variable form really reaches its option (the table is not just text)."""
    env = {"LAGWATCH__STORAGE__MIN_DISTANCE": "7", "LAGWATCH__CLUSTERS__prod__TLS__CA_FILE": "/ca.pem"}
    env["LAGWATCH__EVALUATOR__LAG_THRESHOLD_TOPIC"] = "lag"
    config = load_config(env=env)
    assert config.storage.min_distance == 7 and config.clusters["prod"].tls.ca_file == "/ca.pem"
    assert config.evaluator.lag_threshold_topic == "lag"
    with pytest.raises(ConfigError, match=r"storage\.intervals: must be > 0, got '0'"):
        load_config(env={"LAGWATCH__STORAGE__INTERVALS": "0"})


def test_an_undocumented_option_is_caught(monkeypatch):
    reference = config_reference()
    monkeypatch.setattr(reference, "MEANINGS", {k: v for k, v in reference.MEANINGS.items() if k != "api.host"})
    with pytest.raises(SystemExit, match=r"api\.host: no meaning"):
        reference.options()


@pytest.mark.parametrize("doc", ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in DOCS.glob("*.md"))])
def test_links_to_repository_files_resolve(doc):
    path = ROOT / doc
    broken = []
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        if not (path.parent / target).exists():
            broken.append(target)
    assert not broken, f"{doc}: broken links {broken}"


def test_the_readme_links_the_operator_docs():
    readme = (ROOT / "README.md").read_text()
    for doc in ("docs/configuration.md", "docs/operations.md", "docs/migrating-from-burrow.md"):
        assert f"]({doc})" in readme, doc


def test_every_rules_section_the_code_cites_is_in_docs_rules_md():
    sections = set(re.findall(r"^## (\d+)\. ", (DOCS / "rules.md").read_text(), re.M))
    cited, unresolved = set(), []
    for folder in ("shared", "services", "spark", "lagwatch", "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            for group in re.findall(r"docs/rules\.md ((?:§\d+(?:, )?)+)", text):
                cited.update(re.findall(r"§(\d+)", group))
            if re.search(r"\bspec §\d", text):  # the old, unresolvable form
                unresolved.append(str(path.relative_to(ROOT)))
    for path in [ROOT / "README.md", *DOCS.glob("*.md")]:
        if re.search(r"\bspec §\d", path.read_text()):
            unresolved.append(str(path.relative_to(ROOT)))
    assert cited and cited <= sections
    assert unresolved == []


def test_every_repository_file_the_code_and_docs_name_exists():
    """A docstring, comment or doc that names a file of the repository (`shared/statuses/rules.py`, a test, a doc)
    names one that is there: files move, and a stale path sends a reader nowhere."""
    named = re.compile(
        r"(?<![\w./-])((?:shared|services|spark|lagwatch|tests|docs|bench|scripts|deploy)/[\w./-]*\.(?:py|md|json|ya?ml|toml))\b"
    )
    texts = [*ROOT.glob("*.md"), *DOCS.glob("*.md"), ROOT / "Makefile", ROOT / "pyproject.toml"]
    for folder in ("shared", "services", "spark", "lagwatch", "tests", "bench", "scripts", "deploy"):
        texts += [p for p in (ROOT / folder).rglob("*") if p.suffix in {".py", ".pyx", ".md", ".yml", ".yaml"}]
    missing = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in texts
        if path.is_file()
        for name in named.findall(path.read_text())
        if not (ROOT / name).exists()
    }
    assert not missing


FOLDER = re.compile(r"(?<![\w./-])((?:shared|services|spark|lagwatch|tests|bench)/(?:[a-z_<>]+/)*)")


def test_the_architectures_folders_exist_and_every_stage_folder_is_named():
    """docs/architecture.md's tree and flow match the folders: every folder it names exists, and every stage of
    shared/ and every service is named."""
    text = (DOCS / "architecture.md").read_text()
    named = {m.group(1) for m in FOLDER.finditer(text) if "<" not in m.group(1)}
    missing = sorted(folder for folder in named if not (ROOT / folder).is_dir())
    assert missing == []
    stages = {f"shared/{p.name}/" for p in (ROOT / "shared").iterdir() if (p / "__init__.py").exists()}
    services = {f"services/{p.name}/" for p in (ROOT / "services").iterdir() if (p / "__init__.py").exists()}
    assert stages | services <= named, sorted((stages | services) - named)
    assert len(stages) == 7 and FOLDER.search("in `shared/nowhere/` ").group(1) == "shared/nowhere/"

"""docs/configuration.md's table lists exactly the environment variables the code reads."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "configuration.md"

# A read names its variable literally: os.environ.get/[...]/setdefault, os.getenv, an env dict's .get (a
# child's environment), the settings' _env_* helpers, env(...); in compose and shell, ${NAME...}; in the
# proxy's Caddyfile, {$NAME...}.
CODE_READ = re.compile(
    r"""(?:\b(?:environ|env)(?:\.get|\.setdefault|\.pop)\(|\bos\.getenv\(|\b_env_\w+\(|\benv\(|\b(?:environ|env)\[)"""
    r"""\s*["']([A-Z][A-Z0-9_]*)["']"""
)
INTERPOLATION = re.compile(r"(?:\$\{|\{\$)([A-Z][A-Z0-9_]*)")
# A read whose name is not a literal hides its variable from CODE_READ: only these helpers may do it.
READ_BY_VARIABLE = re.compile(r"""\b(?:os\.environ\.get|os\.getenv|os\.environ\.setdefault)\(\s*[^"'\s)]""")
HELPERS_READING_BY_NAME = {"config/settings.py", "config/local_env.py"}
TABLE_ROW = re.compile(r"^\|\s*`([A-Z][A-Z0-9_]*)`\s*\|", re.MULTILINE)


def _scanned_files() -> list[Path]:
    packages = [init.parent for init in REPO.glob("*/__init__.py") if init.parent.name != "tests"]
    files = [path for package in packages for path in package.rglob("*.py")]
    files += [REPO / "manage.py", REPO / "docker-compose.yml", REPO / "proxy" / "Caddyfile"]
    files += [path for path in (REPO / "bin").iterdir() if path.is_file()]
    return files


def _read_in_code() -> dict[str, set[str]]:
    reads: dict[str, set[str]] = {}
    for path in _scanned_files():
        text = path.read_text(errors="replace")
        for pattern in (CODE_READ, INTERPOLATION):
            for match in pattern.finditer(text):
                reads.setdefault(match.group(1), set()).add(str(path.relative_to(REPO)))
    return reads


def _documented() -> list[str]:
    return TABLE_ROW.findall(DOC.read_text())


def test_every_variable_the_code_reads_is_in_the_table():
    undocumented = {name: sorted(where) for name, where in _read_in_code().items() if name not in _documented()}
    assert not undocumented, f"read but not in docs/configuration.md: {undocumented}"


def test_every_variable_in_the_table_is_read_somewhere():
    stale = sorted(set(_documented()) - set(_read_in_code()))
    assert not stale, f"in docs/configuration.md but read nowhere: {stale}"


def test_the_table_lists_each_variable_once():
    names = _documented()
    assert len(names) == len(set(names)) and len(names) > 40


def test_reads_by_a_computed_name_stay_in_the_helpers_the_scan_sees_through():
    hidden = [
        f"{path.relative_to(REPO)}:{text[: match.start()].count(chr(10)) + 1}"
        for path in _scanned_files()
        if str(path.relative_to(REPO)) not in HELPERS_READING_BY_NAME
        for text in [path.read_text(errors="replace")]
        for match in READ_BY_VARIABLE.finditer(text)
    ]
    assert not hidden, f"environment reads by a computed name (use a literal, or a settings helper): {hidden}"


def test_the_readme_links_the_table():
    readme = (REPO / "README.md").read_text()
    configuration = readme[readme.index("## Configuration"):]
    assert "docs/configuration.md" in configuration[: configuration.index("\n## ", 3)]

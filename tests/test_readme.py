"""The README and the docs site: the settings tables are the settings' own documentation, the
README stays short, and the commands they name exist."""

from __future__ import annotations

import re
from pathlib import Path

from celery_zset_scheduler.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()


def table_rows(text: str) -> list[tuple[str, str, str]]:
    table = text.split("<!-- settings-table -->")[1].split("<!-- /settings-table -->")[0]
    rows = []
    for line in table.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append((cells[0].strip("`"), cells[1].strip("`"), cells[2]))
    return rows


def test_the_configuration_page_documents_every_setting() -> None:
    assert table_rows(CONFIGURATION) == Settings.documentation()


def test_the_readme_shows_the_main_settings_as_documented() -> None:
    documented = Settings.documentation()
    shown = table_rows(README)
    assert 5 <= len(shown) < len(documented)
    assert [row for row in documented if row in shown] == shown  # the same rows, in the same order


def test_the_readme_is_read_in_five_minutes() -> None:
    assert len(README.splitlines()) <= 250


def test_the_two_commands_exist() -> None:
    makefile = (ROOT / "Makefile").read_text()
    for target in ("demo", "test", "example", "docs"):
        assert f"make {target}" in README
        assert re.search(rf"^{target}:", makefile, re.MULTILINE)


def test_the_zset_commands_the_docs_name_exist() -> None:
    from celery_zset_scheduler.celery.cli import zset

    text = README + "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    named = set(re.findall(r"celery -A proj zset ([a-z][a-z-]*)", text))
    operations = (ROOT / "docs" / "operations.md").read_text()
    listed = operations.split("`celery -A proj zset …`:")[1].split("Every command")[0]
    named |= {word.split()[0] for word in re.findall(r"`([a-z][a-z-]*(?: [^`]*)?)`", listed)}
    assert named and named <= set(zset.commands), named - set(zset.commands)
    assert {"docs", "run", "status", "reshard"} <= named


def test_the_install_commands_work_before_pypi() -> None:
    # The package is not on PyPI yet: the first install command must be one that works today.
    install = README.split("## Install and turn it on")[1]
    first = re.search(r"^pip install (\S+)", install, re.MULTILINE)
    assert first is not None and first.group(1).startswith("./"), first
    assert "`pip install celery-zset-scheduler`" in install  # kept for when it is published

"""The README's settings table is the settings' own documentation, and its commands exist."""

from __future__ import annotations

import re
from pathlib import Path

from celery_zset_scheduler.settings import Settings

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def table_rows() -> list[tuple[str, str, str]]:
    table = README.split("<!-- settings-table -->")[1].split("<!-- /settings-table -->")[0]
    rows = []
    for line in table.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append((cells[0].strip("`"), cells[1].strip("`"), cells[2]))
    return rows


def test_settings_table_matches_the_settings() -> None:
    assert table_rows() == Settings.documentation()


def test_the_two_commands_exist() -> None:
    makefile = (Path(__file__).resolve().parent.parent / "Makefile").read_text()
    for target in ("demo", "test", "example"):
        assert f"make {target}" in README
        assert re.search(rf"^{target}:", makefile, re.MULTILINE)

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


def test_the_zset_commands_it_names_exist() -> None:
    from celery_zset_scheduler.celery.cli import zset

    named = set(re.findall(r"celery -A proj zset ([a-z][a-z-]*)", README))
    listed = README.split("`celery -A proj zset …`:")[1].split("Every command")[0]
    named |= {word.split()[0] for word in re.findall(r"`([a-z][a-z-]*(?: [^`]*)?)`", listed)}
    assert named and named <= set(zset.commands), named - set(zset.commands)
    assert "docs" in named


def test_the_install_commands_work_before_pypi() -> None:
    # The package is not on PyPI yet: the first install command must be one that works today.
    use_it = README.split("## Use it")[1]
    first = re.search(r"^pip install (\S+)", use_it, re.MULTILINE)
    assert first is not None and first.group(1).startswith("./"), first
    assert "pip install celery-zset-scheduler`" in use_it  # kept for when it is published

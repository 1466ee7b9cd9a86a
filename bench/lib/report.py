"""The benchmark's result: one :class:`Report` of figures, printed side by side or as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Figure:
    """One measured figure, with the plain-Celery figure it is compared to and the issue's target."""

    name: str
    unit: str
    ours: float | None
    baseline: float | None = None
    baseline_label: str = ""
    target: float | None = None
    higher_is_better: bool = True

    @property
    def meets_target(self) -> bool | None:
        if self.target is None or self.ours is None:
            return None
        return self.ours >= self.target if self.higher_is_better else self.ours <= self.target


@dataclass
class Report:
    """Everything one run measured; ``details`` holds the raw numbers behind each figure."""

    environment: dict[str, Any]
    figures: list[Figure] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def add(self, figure: Figure, **details: Any) -> None:
        self.figures.append(figure)
        if details:
            self.details[figure.name] = details

    def to_json(self) -> str:
        data = asdict(self)
        for item, figure in zip(data["figures"], self.figures, strict=True):
            item["meets_target"] = figure.meets_target
        return json.dumps(data, indent=2, sort_keys=False, default=str)


def _num(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value:,.1f}"
    return f"{value:,.0f}"


def format_report(report: Report) -> str:
    """A plain-text table: our figure, plain Celery's next to it, the issue's target."""
    env = report.environment
    lines = [
        "celery-zset-scheduler benchmark: "
        + ", ".join(f"{k} {v}" for k, v in env.items() if k in _ENV_SHOWN),
        "",
    ]
    header = ("figure", "ours", "plain Celery", "", "target", "")
    rows = [header]
    for f in report.figures:
        target = "-" if f.target is None else ("≥ " if f.higher_is_better else "≤ ") + _num(f.target, f.unit)
        met = {True: "met", False: "not met", None: ""}[f.meets_target]
        rows.append((
            f"{f.name} ({f.unit})", _num(f.ours, f.unit), _num(f.baseline, f.unit), f.baseline_label, target, met,
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    aligns = ["<", ">", ">", "<", ">", "<"]
    for r in rows:
        lines.append("  ".join(f"{c:{a}{w}}" for c, a, w in zip(r, aligns, widths, strict=True)).rstrip())
    lines.insert(3, "-" * len(lines[2]))
    return "\n".join(lines)


_ENV_SHOWN = ("size", "redis", "cpus", "ram_gb", "python", "topology")

"""Charts of a replay: per group, total lag over time drawn over bands coloured by status, as one self-contained HTML
page (inline SVG, no scripts, no network) that any browser opens from disk. Pure functions."""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import NamedTuple

from lagwatch.spark.replay import TimelineRow

WIDTH, HEIGHT, PAD = 900, 160, 36
COLOURS = {"OK": "#d9f2d9", "WARN": "#ffe8a3", "ERR": "#f7b6b6", "NOTFOUND": "#e4e4e4"}
LINE = "#1f4e9c"


class GroupChart(NamedTuple):
    cluster: str
    group: str
    timeline: Sequence[TimelineRow]
    end: int
    summary: str  # one line under the title (incidents, time in statuses, ...)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def group_svg(chart: GroupChart) -> str:
    rows = list(chart.timeline)
    if not rows:
        return "<p>no evaluations</p>"
    start, end = rows[0].at, max(chart.end, rows[-1].at + 1)
    top = max(max(r.totallag for r in rows), 1)
    span, plot_w, plot_h = end - start, WIDTH - 2 * PAD, HEIGHT - 2 * PAD

    def x(t: int) -> float:
        return PAD + (t - start) / span * plot_w

    def y(lag: int) -> float:
        return PAD + plot_h - lag / top * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" role="img">']
    points = []
    for row, until in zip(rows, [r.at for r in rows[1:]] + [end], strict=True):
        parts.append(
            f'<rect x="{x(row.at):.1f}" y="{PAD}" width="{max(x(until) - x(row.at), 0.5):.1f}" height="{plot_h}" '
            f'fill="{COLOURS.get(row.status, "#fff")}"><title>{row.status} from {_when(row.at)}</title></rect>'
        )
        # a step line: lag holds until the next change
        points += [f"{x(row.at):.1f},{y(row.totallag):.1f}", f"{x(until):.1f},{y(row.totallag):.1f}"]
    parts.append(f'<polyline fill="none" stroke="{LINE}" stroke-width="1.5" points="{" ".join(points)}"/>')
    parts.append(f'<text x="{PAD}" y="{PAD - 8}" font-size="11">total lag (max {top:,})</text>')
    parts.append(f'<text x="{PAD}" y="{HEIGHT - 10}" font-size="11">{_when(start)}</text>')
    parts.append(f'<text x="{WIDTH - PAD}" y="{HEIGHT - 10}" font-size="11" text-anchor="end">{_when(end)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def page(charts: Sequence[GroupChart], title: str = "lagwatch replay") -> str:
    legend = " ".join(
        f'<span style="background:{colour};padding:2px 8px;margin-right:6px">{status}</span>'
        for status, colour in COLOURS.items()
    )
    sections = [
        f"<section><h2>{html.escape(c.cluster)} / {html.escape(c.group)}</h2>"
        f"<p>{html.escape(c.summary)}</p>{group_svg(c)}</section>"
        for c in charts
    ]
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:24px;color:#222}h2{font-size:15px;margin:18px 0 2px}"
        "p{margin:2px 0 6px;font-size:13px;color:#555}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>{legend}</p>{''.join(sections) or '<p>no groups</p>'}</body></html>"
    )

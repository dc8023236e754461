"""Rate charts as inline SVG, drawn on the server: msg/s in and out over the rate history's window.

    +-------------------------------------------+  y: 0 .. a round maximum above the largest point
    | 120 -                 /\\                  |  x: time, the newest sample at the right edge;
    |      ___/\\__________/  \\___   in  (blue)   |     the window is (points_max - 1) intervals,
    |   0 ---------------------------- out (red)|     so a short series (a topic whose traffic
    |   -10 min                           now   |     began lately) starts part-way across
    +-------------------------------------------+

Each line is a <polyline> with one point per sample and data-points = the number of samples, so a
test (or a curious user) can check what was drawn. No script and no external asset.
"""

from __future__ import annotations

import math
from typing import Final

from velamq.admin._console_html import esc, fmt_rate
from velamq.broker import RateSeries

width_px: Final = 640
height_px: Final = 170
_LEFT: Final = 48  # room for the y labels
_RIGHT: Final = 12
_TOP: Final = 14
_BOTTOM: Final = 24  # room for the x labels
_COLOURS: Final = {"in": "#2368c4", "out": "#d2581e"}


def _round_max(value: float) -> float:
    """The smallest 1, 2 or 5 x 10^k at or above value (at least 1): a y axis people can read."""
    if value <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return float(step * power)
    return float(10 * power)


def _window_label(seconds: float) -> str:
    return f"-{seconds / 60:.0f} min" if seconds >= 90 else f"-{seconds:.0f} s"


def rate_chart(series: RateSeries, title: str) -> str:
    """The chart, or a note when there is nothing to draw yet."""
    count = len(series.msg_in)
    if count == 0:
        return f"<p class='note'>{esc(title)}: no samples yet (one every {series.interval_s:g} s).</p>"
    plot_w = width_px - _LEFT - _RIGHT
    plot_h = height_px - _TOP - _BOTTOM
    window_s = max(1, series.points_max - 1) * series.interval_s
    top = _round_max(max(max(series.msg_in), max(series.msg_out)))

    def x(i: int) -> float:
        age_s = (count - 1 - i) * series.interval_s
        return _LEFT + plot_w * (1 - age_s / window_s)

    def y(value: float) -> float:
        return _TOP + plot_h * (1 - min(value, top) / top)

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width_px}' height='{height_px}' "
        f"viewBox='0 0 {width_px} {height_px}' role='img' class='rate-chart' data-samples='{count}'>",
        f"<title>{esc(title)}</title>",
        f"<rect x='{_LEFT}' y='{_TOP}' width='{plot_w}' height='{plot_h}' fill='#fbfcfd' stroke='#d5dae1'/>",
    ]
    for fraction in (0.0, 0.5, 1.0):  # grid lines and y labels at 0, half and the top
        gy = y(top * fraction)
        parts.append(f"<line x1='{_LEFT}' x2='{_LEFT + plot_w}' y1='{gy:.1f}' y2='{gy:.1f}' stroke='#e6e9ed'/>")
        parts.append(
            f"<text x='{_LEFT - 4}' y='{gy + 4:.1f}' font-size='11' text-anchor='end' fill='#5d6875'>"
            f"{esc(fmt_rate(top * fraction))}</text>"
        )
    label_y = height_px - 7
    parts.append(f"<text x='{_LEFT}' y='{label_y}' font-size='11' fill='#5d6875'>{_window_label(window_s)}</text>")
    parts.append(
        f"<text x='{_LEFT + plot_w}' y='{label_y}' font-size='11' text-anchor='end' fill='#5d6875'>now</text>"
    )
    for key, values in (("in", series.msg_in), ("out", series.msg_out)):
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        parts.append(
            f"<polyline class='rate-{key}' data-points='{count}' points='{points}' fill='none' "
            f"stroke='{_COLOURS[key]}' stroke-width='1.6' stroke-linejoin='round'/>"
        )
    legend_x = _LEFT + plot_w / 2 - 90
    for offset, (key, values) in enumerate((("in", series.msg_in), ("out", series.msg_out))):
        lx = legend_x + offset * 110
        parts.append(f"<rect x='{lx:.0f}' y='{label_y - 8}' width='10' height='3' fill='{_COLOURS[key]}'/>")
        parts.append(
            f"<text x='{lx + 14:.0f}' y='{label_y}' font-size='11' fill='#1d2733'>{key} "
            f"{esc(fmt_rate(values[-1]))} msg/s</text>"
        )
    parts.append("</svg>")
    return f"<div class='chart'>{''.join(parts)}</div>"

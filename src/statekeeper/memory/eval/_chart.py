"""A small SVG chart of an answer evaluation: answer quality against tokens sent, one
point per condition. Plain SVG written here (no plotting library); every text is
escaped."""

from __future__ import annotations

import math
from html import escape

from statekeeper.memory.eval._answer_report import OVERALL, AnswerReport

__all__ = ["answers_chart"]

_WIDTH, _HEIGHT = 640, 400
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 170, 40, 56  # margins around the plot area
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")


def answers_chart(report: AnswerReport) -> str:
    """An SVG document: for each condition, its mean context tokens per question
    (x, logarithmic) against its containment (filled dot) and answer F1 (ring) over
    every question with a gold answer, with a legend."""
    points = []
    for condition in report.conditions:
        m = report.metrics[condition][OVERALL]
        points.append((condition, max(m.tokens, 1.0), m.containment or 0.0, m.f1 or 0.0))
    low = 10 ** math.floor(math.log10(min(p[1] for p in points)))
    high = 10 ** math.ceil(math.log10(max(p[1] for p in points)))
    high = max(high, low * 10)
    plot_w = _WIDTH - _LEFT - _RIGHT
    plot_h = _HEIGHT - _TOP - _BOTTOM

    def x(tokens: float) -> float:
        return _LEFT + plot_w * math.log10(tokens / low) / math.log10(high / low)

    def y(score: float) -> float:
        return _TOP + plot_h * (1 - score)

    store = report.settings.get("store_url", "")
    title = f"Answer quality vs tokens sent ({report.reader} reader, store {store})"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT}" font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{_LEFT}" y="22" font-size="14">{escape(title)}</text>',
    ]
    for tick in range(6):  # y grid: 0, 0.2, ... 1
        score = tick / 5
        parts.append(
            f'<line x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{y(score):.1f}" '
            f'y2="{y(score):.1f}" stroke="#ddd"/>'
            f'<text x="{_LEFT - 8}" y="{y(score) + 4:.1f}" text-anchor="end">{score:.1f}</text>'
        )
    decade = low
    while decade <= high:  # x ticks: powers of ten
        parts.append(
            f'<line x1="{x(decade):.1f}" x2="{x(decade):.1f}" y1="{_TOP}" '
            f'y2="{_TOP + plot_h}" stroke="#ddd"/>'
            f'<text x="{x(decade):.1f}" y="{_TOP + plot_h + 16}" '
            f'text-anchor="middle">{decade:g}</text>'
        )
        decade *= 10
    parts.append(
        f'<text x="{_LEFT + plot_w / 2:.1f}" y="{_HEIGHT - 14}" text-anchor="middle">'
        "context tokens per question (log scale)</text>"
        f'<text x="16" y="{_TOP + plot_h / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 16 {_TOP + plot_h / 2:.1f})">score</text>'
    )
    for n, (condition, tokens, containment, f1) in enumerate(points):
        color = _COLORS[n % len(_COLORS)]
        label = escape(condition)
        parts.append(
            f'<circle cx="{x(tokens):.1f}" cy="{y(containment):.1f}" r="5" fill="{color}">'
            f"<title>{label}: containment {containment:.3f}, {tokens:.0f} tokens</title></circle>"
            f'<circle cx="{x(tokens):.1f}" cy="{y(f1):.1f}" r="5" fill="none" '
            f'stroke="{color}" stroke-width="2">'
            f"<title>{label}: F1 {f1:.3f}, {tokens:.0f} tokens</title></circle>"
        )
        legend_y = _TOP + 8 + 18 * n
        parts.append(
            f'<circle cx="{_WIDTH - _RIGHT + 20}" cy="{legend_y}" r="5" fill="{color}"/>'
            f'<text x="{_WIDTH - _RIGHT + 32}" y="{legend_y + 4}">{label}</text>'
        )
    key_y = _TOP + 8 + 18 * len(points) + 10
    parts.append(
        f'<circle cx="{_WIDTH - _RIGHT + 20}" cy="{key_y}" r="5" fill="#666"/>'
        f'<text x="{_WIDTH - _RIGHT + 32}" y="{key_y + 4}">containment</text>'
        f'<circle cx="{_WIDTH - _RIGHT + 20}" cy="{key_y + 18}" r="5" fill="none" '
        'stroke="#666" stroke-width="2"/>'
        f'<text x="{_WIDTH - _RIGHT + 32}" y="{key_y + 22}">F1</text>'
        "</svg>"
    )
    return "\n".join(parts) + "\n"

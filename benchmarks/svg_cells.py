"""Compare two SVG screenshots (Textual/Rich ``export_screenshot``) cell by cell.

``python benchmarks/svg_cells.py OLD.svg NEW.svg`` prints how many cells differ in character,
text style (for non-blank cells) or background, and exits 1 if any does. A snapshot whose SVG
changed only because its segments were cut differently (one segment per run of equal cells
instead of one per cell) shows 0: it looks the same. Used to check snapshot updates of
rendering-only changes (docs/benchmarks.md).
"""

from __future__ import annotations

import html
import re
import sys

CELL_W = 12.2  # Rich's export_svg: char width in px
TEXT_BASELINE = 18.3  # a text's y is its row's y + this (kept apart from the row's rects)


def cells(path: str) -> dict[tuple[float, int], dict[str, str]]:
    s = open(path, encoding="utf-8").read()
    prefix = re.search(r"\.([\w-]+)-matrix", s).group(1)
    css = dict(re.findall(r"\." + re.escape(prefix) + r"-(r\d+) \{ ([^}]*) \}", s))
    body = s[s.index(prefix + '-matrix">'):]
    out: dict[tuple[float, int], dict[str, str]] = {}
    for m in re.finditer(r'<rect fill="(#\w+)" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="[\d.]+" '
                         r'shape-rendering="crispEdges"/>', body):
        x0, n, y = round(float(m.group(2)) / CELL_W), round(float(m.group(4)) / CELL_W), float(m.group(3))
        for i in range(n):
            out.setdefault((y, x0 + i), {})["bg"] = m.group(1)
    for m in re.finditer(r'<text class="' + re.escape(prefix) + r'-(r\d+)" x="([\d.]+)" y="([\d.]+)" '
                         r'textLength="[\d.]+"[^>]*>(.*?)</text>', body, re.S):
        x0, y = round(float(m.group(2)) / CELL_W), round(float(m.group(3)) - TEXT_BASELINE, 1)
        for i, ch in enumerate(html.unescape(m.group(4)).replace("\xa0", " ")):
            if ch != " ":  # a blank's text style is invisible
                out.setdefault((y, x0 + i), {}).update(ch=ch, style=css[m.group(1)])
    return out


def main(old: str, new: str) -> int:
    a, b = cells(old), cells(new)
    keys = sorted(set(a) | set(b))
    diff = [(k, a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)]
    print(f"{len(keys)} cells, {len(diff)} differ")
    for d in diff[:20]:
        print(" ", d)
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))

"""A report page from its sections: one self-contained HTML file (no script, no external
resource; every string escaped) and the same in Markdown (backslash escapes, never an HTML
entity, so report.md reads as written wherever it is pasted)."""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape


@dataclass
class Section:
    title: str
    tables: list[tuple[list[str], list[list[str]]]] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    figures: list[tuple[str, str, bytes]] = field(default_factory=list)  # (file, alt, png)
    pre: str | None = None
    strong: set[str] = field(default_factory=set)  # first cells of rows to set in bold
    #: per table (its index): cells (row, column) marked "better" or "worse", coloured in
    #: HTML and followed by the word in Markdown
    marks: dict[int, dict[tuple[int, int], str]] = field(default_factory=dict)


CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1em}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:right}td:first-child,th:first-child{text-align:left}th{background:#f3f3f3}
img{max-width:100%;display:block;margin:.5em 0}pre{background:#f7f7f7;padding:1em;
overflow:auto;font-size:12px}h2{border-bottom:1px solid #ddd;padding-bottom:.2em}
tr.key td{font-weight:600;background:#fff8dc}tr td.better{background:#e6f4ea;color:#0f5f2a}
tr td.worse{background:#fdeaea;color:#9b1c1c}p.warning{background:#fff4e0;font-weight:600;
border-left:4px solid #d97706;padding:.4em .8em}"""


def to_html(title: str, sections: Sequence[Section]) -> str:
    """One self-contained HTML page (no script, no external resource)."""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{escape(title)}</h1>"]
    for sec in sections:
        parts.append(f"<h2>{escape(sec.title)}</h2>")
        # a warning stands out from the prose around it: the eye lands on the coloured
        # table, and a warning that the runs are not comparable must be seen before it
        parts.extend(f'<p class="warning">{escape(t)}</p>' if t.startswith("Warning:")
                     else f"<p>{escape(t)}</p>" for t in sec.text)
        for t, (header, rows) in enumerate(sec.tables):
            marks = sec.marks.get(t, {})
            parts.append("<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in header)
                         + "</tr>")
            parts.extend(("<tr class=\"key\">" if row and row[0] in sec.strong else "<tr>")
                         + "".join(f'<td class="{marks[i, j]}">{escape(c)}</td>'
                                   if (i, j) in marks else f"<td>{escape(c)}</td>"
                                   for j, c in enumerate(row)) + "</tr>"
                         for i, row in enumerate(rows))
            parts.append("</table>")
        for _, alt, png in sec.figures:
            b64 = base64.b64encode(png).decode("ascii")
            parts.append(f'<img alt="{escape(alt)}" src="data:image/png;base64,{b64}">')
        if sec.pre:
            parts.append(f"<pre>{escape(sec.pre)}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


_MD_SPECIAL = re.compile(r"([\\`*<>|\[\]])|&(?=#?\w+;)")


def _md_cell(x: str) -> str:
    """Text for Markdown: backslash escapes (CommonMark) for what could start markup,
    HTML or a table cell's end; never an HTML entity, so the file reads as written."""
    return _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), x).replace("\n", " ")


def to_markdown(title: str, sections: Sequence[Section]) -> str:
    """The same report in Markdown; images referenced from plots/."""
    lines = [f"# {_md_cell(title)}", ""]
    for sec in sections:
        lines += [f"## {_md_cell(sec.title)}", ""]
        lines += [(f"**Warning:**{_md_cell(t[8:])}" if t.startswith("Warning:")
                   else _md_cell(t)) + "\n" for t in sec.text]
        for t, (header, rows) in enumerate(sec.tables):
            marks = sec.marks.get(t, {})
            lines.append("| " + " | ".join(_md_cell(h) for h in header) + " |")
            lines.append("|" + "---|" * len(header))
            lines += ["| " + " | ".join(
                (f"**{_md_cell(c)}**" if j == 0 and c in sec.strong
                 else _md_cell(f"{c} ({marks[i, j]})" if (i, j) in marks else c))
                for j, c in enumerate(row)) + " |" for i, row in enumerate(rows)]
            lines.append("")
        lines += [f"![{_md_cell(alt)}](plots/{fname})\n" for fname, alt, _ in sec.figures]
        if sec.pre:
            lines += ["```json", sec.pre.replace("```", "` ` `"), "```", ""]
    return "\n".join(lines)

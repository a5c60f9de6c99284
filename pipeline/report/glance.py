"""The run report's headline: the answer at a glance, at the top of the page (issue 42).

Why a module of its own: the facts are pipeline/headline.py's (the terminal prints the same ones,
in the same words); here each becomes one line of the page's first box, linked to the section that
draws it (the critical path, the ranks, the timeline), so the reader sees the answer without
scrolling and one click shows the evidence.
"""
from __future__ import annotations

import re
from typing import Any

from ..headline import headline
from .template import esc

#: Labels of the facts on the page (the terminal's are shorter).
_LABELS = {"step": "step", "culprit": "who held it back", "recurs": "across steps", "GPU": "GPU"}


def _marked(text: str) -> str:
    """A named culprit's `rank R` marked as on the ranks section (`straggler-rank`)."""
    m = re.match(r"((?:[\w-]+: )?)rank (\d+) lost ", text)
    if not m:
        return esc(text)
    return f'{esc(m.group(1))}<b class="straggler-rank">rank {m.group(2)}</b> ' + esc(text[m.end() - 5:])


def glance_section(phases: Any, ranks_rows: Any, anchors: set[str]) -> str:
    """HTML: the headline box; each fact links to its section when the page has it (`anchors`)."""
    facts = headline(phases, ranks_rows)
    if not facts:
        return ""
    rows = []
    for f in facts:
        text = _marked(f.text) if f.label == "culprit" else esc(f.text)
        cell = f'<a href="#{esc(f.anchor)}">{text}</a>' if f.anchor in anchors else text
        rows.append(f'<div class="fact"><span class="k">{esc(_LABELS.get(f.label, f.label))}</span>'
                    f'<span class="v">{cell}</span></div>')
    return f'<section id="headline" class="headline" aria-label="at a glance">{"".join(rows)}</section>'


def anchors_of(body: list[str]) -> set[str]:
    """The ids the page's sections carry (`id=x` or `id="x"`)."""
    return set(re.findall(r'\bid="?([\w-]+)"?', "".join(body)))

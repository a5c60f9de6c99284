"""The terminal view of a summary: one table per (role, rank, process) of the chosen step's phases,
as a depth-first tree of the longest phases.

Why apart from the adapters: rows of every format are shown alike, and rich is imported only here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from .phases import PATH_SEP, UNATTRIBUTED
from .types import DEFAULT_TOP_PHASES

if TYPE_CHECKING:
    import pyarrow as pa


def _ms(ns: Any) -> str:
    return "" if ns is None else f"{ns / 1e6:,.1f}"


_NAME_WIDTH = 36


def top_phases(part: list[dict[str, Any]], top: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The `top` phases of one process by wall time (ancestors of a shown phase are shown too, so
    the tree reads; the `(unattributed)` row always), in start order; and the rest."""
    by_path = {r.get("path") or r.get("phase"): r for r in part}
    ranked = sorted((r for r in part if r.get("phase") != UNATTRIBUTED),
                    key=lambda x: (-(x.get("wall_ns") or 0), x.get("start_ns") or 0))
    shown: dict[int, dict[str, Any]] = {id(r): r for r in part if r.get("phase") == UNATTRIBUTED}
    for row in ranked:
        if len(shown) >= top + 1:
            break
        chain = [row]
        path = str(row.get("path") or "")
        while PATH_SEP in path:
            path = path.rsplit(PATH_SEP, 1)[0]
            if path in by_path:
                chain.append(by_path[path])
        for r in chain:
            shown[id(r)] = r
    rest = [r for r in part if id(r) not in shown]

    first: dict[str, int] = {}      # path prefix -> earliest start under it (prefixes without a row too)
    for r in part:
        parts = str(r.get("path") or r.get("phase") or "").split(PATH_SEP)
        for k in range(len(parts)):
            key = PATH_SEP.join(parts[:k + 1])
            first[key] = min(first.get(key, 1 << 62), int(r.get("start_ns") or 0))

    def tree_order(x: dict[str, Any]) -> tuple:
        """Depth-first, siblings by start time: each ancestor's start, outermost first."""
        parts = str(x.get("path") or x.get("phase") or "").split(PATH_SEP)
        return (x.get("phase") == UNATTRIBUTED,
                tuple((first[PATH_SEP.join(parts[:k + 1])], parts[k]) for k in range(len(parts))))

    return sorted(shown.values(), key=tree_order), rest


def render_phase_table(phases_rows: "list[dict[str, Any]] | pa.Table", console: Any = None,
                       top: int = DEFAULT_TOP_PHASES) -> Any:
    """A rich table per (role, rank, process) of the chosen step's phases; printed when `console`.

    At most `top` phases per process (the longest by wall time, with their enclosing phases), then
    one line saying how many more are in phases.parquet, so no input prints hundreds of rows. GPU
    time is shown twice: NVIDIA's same-thread figure and the inherited one (what the phase caused,
    backward kernels of autograd's thread included); the `(unattributed)` row's inherited figure is
    what no rule could place."""
    rows = phases_rows.to_pylist() if hasattr(phases_rows, "to_pylist") else list(phases_rows)
    if console is None:
        console = Console()
    narrow = (console.width or 80) < 110          # an 80-column terminal: the figures that matter most
    width = 27 if narrow else _NAME_WIDTH
    cols = [("phase", "left"), ("stage", "left"), ("n", "right"), ("wall ms", "right"), ("GPU ms", "right"),
            ("GPU inh. ms", "right"), ("kernels", "right"), ("comm ms", "right"), ("mem GiB", "right")]
    if narrow:
        cols = [c for c in cols if c[0] not in ("stage", "comm ms", "mem GiB")]
    tables = []
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row.get("role"), row.get("rank"), row.get("pid"), row.get("source")), []).append(row)
    for (role, rank, pid, source), part in groups.items():
        step = part[0].get("step")
        how = part[0].get("rank_source")
        rank_txt = f"{rank if rank is not None else '?'}" + (f" ({how})" if how and how != "artifact" else "")
        who = role or "role unknown"
        if rank is not None or how:     # a process with no rank (the trainer) shows none
            who += f" rank {rank_txt}"
        title = f"{who} (pid {pid}) step {step}: {source}"
        t = Table(title=title, title_justify="left")
        for col, just in cols:
            t.add_column(col, justify=just, no_wrap=True, min_width=max(3, len(col)),  # type: ignore[arg-type]
                         max_width=width if col == "phase" else 12 if col == "stage" else None)
        shown, rest = top_phases(part, max(1, top))
        for row in shown:
            peak = row.get("mem_peak_bytes")
            inh = row.get("gpu_busy_inherited_ns")
            label = "  " * int(row.get("depth") or 0) + str(row.get("phase"))
            cells = {
                "phase": label if len(label) <= width else label[:width - 1] + "…", "stage": str(row.get("stage")),
                "n": str(row.get("instances") or 1), "wall ms": _ms(row.get("wall_ns")),
                "GPU ms": _ms(row.get("gpu_busy_ns")),
                "GPU inh. ms": ("left " if row.get("phase") == UNATTRIBUTED else "") + _ms(inh),
                "kernels": f"{row.get('kernel_count') or 0:,}", "comm ms": _ms(row.get("comm_ns")),
                "mem GiB": "" if peak is None else f"{peak / 2**30:.2f}"}
            t.add_row(*(cells[c] for c, _ in cols))
        if rest:
            shown_paths = {r.get("path") for r in shown}
            # only the outermost hidden phases: nested ones are inside their time already
            outer = [r for r in rest if str(r.get("path") or "").rsplit(PATH_SEP, 1)[0] in shown_paths
                     or PATH_SEP not in str(r.get("path") or "")]
            hidden_ms = sum((r.get("wall_ns") or 0) for r in outer) / 1e6
            t.caption = f"{len(rest)} more phases ({hidden_ms:,.1f} ms wall) in phases.parquet"
            t.caption_style = "none"
            t.caption_justify = "left"
        tables.append(t)
    for t in tables:
        console.print(t)
    return tables

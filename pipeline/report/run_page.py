"""The bundle page (`collect --html`, or `render_bundle_report(OUT)` afterwards).

Reads top to bottom like the page: the facts of the run; per process a bar as long as its step
(phases + gaps, GPU busy under it); the timeline of the step, one lane per process; the stage
table (slowest process); the window trace files; the top kernels. Every process links to the
window trace of the source its rows came from.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from ...stages.core.errors import BadInputError
from .. import compare, ranks
from .culprit_marks import culprit_marks
from .glance import anchors_of, glance_section
from .gpu_lanes import LANE_CATEGORIES, LANE_COLORS, GpuIntervals, read_bundle_gpu
from . import many_ranks
from .links import TRACE_NOTE, TraceFiles, fmt_bytes, leaf, traces_of
from .processes import ProcessId, ProcessStep, process_steps
from .rank_skew import ranks_section
from .step_bars import GPU_BAR_COLOR, svg_step_bars
from .template import (
    GAP_COLOR,
    esc,
    fmt_ms,
    isnull,
    kernel_labels,
    legend,
    page,
    stage_color,
    stage_order,
    table,
)
from .timeline import COMPACT_LANES, origin_text, svg_timeline, time_range

ProcKey = tuple[Any, Any, Any, Any]   # (source_kind, role, rank, pid), nulls as None, numbers as int


def _proc_key(kind: Any, role: Any, rank: Any, pid: Any) -> ProcKey:
    """One hashable key per process whatever the frame made of nulls (None/NaN) and ints (0/0.0)."""
    def norm(v: Any, number: bool) -> Any:
        if v is None or (not isinstance(v, (str, bytes)) and bool(pd.isna(v))):
            return None
        try:
            return int(v) if number else str(v)
        except (TypeError, ValueError):
            return str(v)
    return (norm(kind, False), norm(role, False), norm(rank, True), norm(pid, True))


def _short_label(role: Any, rank: Any, pid: Any) -> str:
    r = role if not isnull(role) and role else ""
    k = f"rank {int(rank)}" if not isnull(rank) else (f"pid {int(pid)}" if not isnull(pid) else "")
    return f"{r} {k}".strip() or "?"


def _sources_of_processes(phases_rows: Any) -> dict[ProcKey, list[str]]:
    """Which sources each (kind, role, rank, pid) process's phase rows came from (first seen first)."""
    df = compare.to_frame(phases_rows)
    out: dict[ProcKey, list[str]] = {}
    if df.empty or "source" not in df.columns:
        return out
    cols = [df[c] if c in df.columns else [None] * len(df) for c in compare.PROCESS_KEYS]
    for src, *key in zip(df["source"], *cols):
        if isinstance(src, str):
            lst = out.setdefault(_proc_key(*key), [])
            if src not in lst:
                lst.append(src)
    return out


def _trace_for(p: ProcessStep, traces: Mapping[str, TraceFiles]) -> TraceFiles | None:
    return next((traces[s] for s in p.sources if s in traces), None)


def _gpu_lanes(procs: list[ProcessStep], traces: Mapping[str, TraceFiles],
               bundle: Path | None) -> tuple[dict[ProcessId, GpuIntervals | None], list[str]]:
    if bundle is None:
        return {}, []
    wanted: dict[ProcessId, tuple[str, int | None]] = {}
    files: dict[str, tuple[str, str | None, str | None]] = {}
    for p in procs:
        t = _trace_for(p, traces)
        if t is not None:
            wanted[p.ident] = (t.source, p.pid)
            files[t.source] = (t.kind, t.chrome_rel, t.sqlite_rel)
    got, problems = read_bundle_gpu(bundle, files, wanted.values())
    return {ident: got.get(key) for ident, key in wanted.items()}, problems


_BARS_NOTE = ('<p class="note">Each bar is one process\'s step: its wall time cut into its top-level phases and '
              'the gaps between them (grey), so the bar is exactly as long as the step. The thin dark bar under '
              'it is the GPU busy time inside the step, on the same scale; GPU time of kernels launched outside '
              'every range is given as <i>unattributed GPU</i>, never stacked onto wall time. '
              'Click a process to open its window trace.</p>')


def _timeline_note(t0: int, n: int) -> str:
    extra = f" With {n} lanes they are drawn thin and scroll inside the box." if n > COMPACT_LANES else ""
    return (f'<p class="note">0 ms = {esc(origin_text(t0))}, the earliest step start; every source\'s clock is aligned to '
            'UTC by collect, so lanes compare directly. Each lane: the process\'s top-level phases (dashed: its '
            'step window) and, under them, its GPU activity (kernels and copies merged to pixel size; light grey = '
            f'GPU idle). Hover for phase, duration and GPU busy; click a lane to open its window trace.{extra}</p>')


def render_run_report(phases_rows: Any, kernels_rows: Any, manifest: Mapping[str, Any] | None, *,
                      steps_rows: Any = None, bundle: str | Path | None = None, title: str | None = None,
                      top: int = 20, ranks_rows: Any = None) -> str:
    """One bundle's page. `bundle` (the folder holding summaries/ and traces/) adds the GPU lanes
    of the timeline and, when `steps_rows` is not given, the step windows of steps.parquet."""
    manifest = manifest or {}
    bundle_dir = Path(bundle) if bundle is not None else None
    if steps_rows is None and bundle_dir is not None and (bundle_dir / "summaries" / "steps.parquet").is_file():
        steps_rows = pd.read_parquet(bundle_dir / "summaries" / "steps.parquet")
    traces = traces_of(manifest)
    sources = _sources_of_processes(phases_rows)
    procs = process_steps(phases_rows, steps_rows, manifest)
    hrefs = {p.ident: (t.href if (t := _trace_for(p, traces)) else None) for p in procs}

    body: list[str] = []
    window = manifest.get("window") if isinstance(manifest.get("window"), dict) else {}
    cfg = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    arts = manifest.get("artifacts")
    facts = [("created", manifest.get("created")), ("verlprof", manifest.get("verlprof_version")),
             ("tool", cfg.get("tool")), ("profiled steps", cfg.get("profiled_steps")),
             ("summarized step", window.get("step")), ("why this step", window.get("reason")),
             ("artifacts", len(arts) if isinstance(arts, list) else None),
             ("processes", len(procs) or None),
             ("window traces", f'<a href="#traces">{len(traces)} source(s)</a>' if traces else None),
             ("all ranks in one trace", f'<a href="{esc(manifest["merged_trace"])}">{esc(manifest["merged_trace"])}</a> '
              '(Perfetto / chrome://tracing; one track group per "role rank R")'
              if isinstance(manifest.get("merged_trace"), str) else None)]
    facts_table = table([("fact", "l"), ("value", "l")],
                        [[(esc(k), "l"), (v if k in ("window traces", "all ranks in one trace") else esc(v), "l")]
                         for k, v in facts if v not in (None, "", [])])

    if ranks_rows is None and bundle_dir is not None:   # collect's page: the bundle's table has every step
        ranks_rows = ranks.bundle_ranks_table(bundle_dir, phases_rows)
    ranks_df = compare.to_frame(ranks_rows)
    if ranks_df.empty or "statement" not in ranks_df.columns:   # none, or a bundle older than issue 32
        ranks_df = ranks.ranks_table(phases_rows).to_pandas()
    chosen_df = ranks.chosen_rows(ranks_df)
    body.append("<h2>Step time per process</h2>")
    if not procs:
        body.append("<p>No phase rows.</p>")
    else:
        present = stage_order(ph.stage for p in procs for ph in p.phases)
        shown = many_ranks.select(procs, chosen_df)   # past MANY processes: the ones that matter
        if len(shown) < len(procs):
            body.append(many_ranks.note(len(procs), len(shown)))
            body.append(many_ranks.histogram(procs, shown))
        body.append(legend([(s, stage_color(s)) for s in present]
                           + [("between phases", GAP_COLOR), ("GPU busy", GPU_BAR_COLOR)]))
        body.append(_BARS_NOTE)
        body.append(svg_step_bars(shown, hrefs))
        if len(shown) < len(procs):
            body.append(many_ranks.all_processes(procs, hrefs))
        all_procs, procs = procs, shown

        gpu, problems = _gpu_lanes(procs, traces, bundle_dir)
        step_no = window.get("step")
        body.append(f'<h2 id="timeline">Timeline of step {esc(step_no) if step_no is not None else ""}</h2>')
        body.append(legend([(s, stage_color(s)) for s in present]
                           + [(f"GPU: {c}", LANE_COLORS[c]) for c in reversed(LANE_CATEGORIES)]))
        body.append(_timeline_note(time_range(procs)[0], len(procs)))
        if bundle_dir is None:
            body.append('<p class="note">GPU lanes need the bundle folder (its window traces); none was given.</p>')
        for line in problems:
            body.append(f'<p class="note">{esc(line)}</p>')
        marks = culprit_marks(phases_rows, chosen_df)
        if marks:
            body.append(legend([("culprit: its lane and the range where it lost the time (outlined)", "#d62728")])
                        .replace("<i ", '<i class="mark-key" ', 1)
                        + '<p class="note">Hatched red: the stretch each victim waited for the culprit (its wait '
                        "beyond the culprit's own in that range; ranks.parquet <code>wait_ns</code>).</p>")
        body.append(f'<div class="lanes">{svg_timeline(procs, gpu, hrefs, marks=marks)}</div>')
        procs = all_procs

    per = compare.process_stage_totals(phases_rows)
    if not per.empty:
        body.append(_stage_table(phases_rows, per, traces, sources, chosen_df, window.get("step")))
    body.append(ranks_section(ranks_df))
    if traces:
        body.append(_trace_table(traces, sources, limit=many_ranks.MANY if len(procs) > many_ranks.MANY else None))
    body.append(_kernel_table(kernels_rows, top))
    # the answer first (its lines link to the sections above, built first), then the run's facts
    head = glance_section(phases_rows, ranks_df, anchors_of(body))
    body[:0] = [head, '<details class="facts"><summary>About this run (created, tool, steps, traces)</summary>'
                + facts_table + "</details>"]
    return page(title or "verlprof run report", body)


def _stage_table(phases_rows: Any, per: pd.DataFrame, traces: Mapping[str, TraceFiles],
                 sources: Mapping[ProcKey, list[str]], ranks_df: pd.DataFrame | None = None,
                 step: Any = None) -> str:
    """Per (stage, role): the values of the role's process with the slowest step (every row of a
    role comes from that one process, `compare.stage_totals`, so they add up to its step), linked
    to that process's trace: the link opens the trace whose number is shown (issue 41: it used to
    open the stage's slowest or straggler rank, another process than the one of the numbers). When
    the stage names a straggler elsewhere, its trace follows as a second link."""
    late: dict[tuple[Any, Any], int] = {}
    for r in ranks.stragglers(ranks_df if ranks_df is not None else pd.DataFrame()).to_dict("records"):
        late.setdefault((r["stage"], r["role"] if isinstance(r["role"], str) else None), int(r["straggler_rank"]))
    shown: dict[tuple[Any, Any], ProcKey] = {}   # (role, source_kind) -> the process of the numbers
    by_rank: dict[tuple[Any, Any, int], ProcKey] = {}
    best: dict[tuple[Any, Any], float] = {}
    for r in per.to_dict("records"):
        pk = _proc_key(r["source_kind"], r["role"], r["rank"], r["pid"])
        if pk[2] is not None:
            by_rank.setdefault((pk[1], pk[0], pk[2]), pk)
        if r["stage"] != "step":
            continue
        v = float(r["wall_ns"] or 0)
        if (pk[1], pk[0]) not in best or v > best[(pk[1], pk[0])]:
            best[(pk[1], pk[0])], shown[(pk[1], pk[0])] = v, pk

    def link(pk: ProcKey, label: str, why: str) -> str:
        t = next((traces[s] for s in sources.get(pk, []) if s in traces), None)
        if t is None:
            return ""
        return f'<a href="{esc(t.href)}" title="{esc(why)}: {esc(t.source)}">{esc(label)}</a>'

    def trace_cell(r: Mapping[str, Any]) -> str:
        role = None if isnull(r["role"]) else str(r["role"])
        kind = None if isnull(r["source_kind"]) else str(r["source_kind"])
        pk = shown.get((role, kind))
        if pk is None:
            return ""
        out = link(pk, _short_label(pk[1], pk[2], pk[3]), "the process whose figures the row shows")
        who = late.get((r["stage"], role))
        other = by_rank.get((role, kind, who)) if who is not None else None
        if other is not None and other != pk:
            extra = link(other, f"straggler rank {who}", "the stage's straggler")
            out = f"{out} · {extra}" if out and extra else out or extra
        return out

    totals = compare.stage_totals(phases_rows, per)
    recs = totals.to_dict("records")
    cols: list[tuple[tuple[str, str], Any]] = [
        (("stage", "l"), lambda r: (esc(r["stage"]), "l")), (("role", "l"), lambda r: (esc(r["role"]), "l")),
        (("source", "l"), lambda r: (esc(r["source_kind"]), "l")), (("wall ms", ""), lambda r: (fmt_ms(r["wall_ns"]), "")),
        (("GPU ms", ""), lambda r: (fmt_ms(r["gpu_busy_inherited_ns"]), "")),
        (("GPU %", ""), lambda r: (compare.gpu_percent(r["gpu_busy_inherited_ns"], r.get(compare.SPAN)), "")),
        (("same-thread ms", ""), lambda r: (fmt_ms(r["gpu_busy_ns"]), "")),
        (("kernel ms", ""), lambda r: (fmt_ms(r["kernel_ns"]), "")), (("comm ms", ""), lambda r: (fmt_ms(r["comm_ns"]), "")),
        (("mem peak", ""), lambda r: (fmt_bytes(None if isnull(r["mem_peak_bytes"]) else int(r["mem_peak_bytes"])), "")),
        (("processes", ""), lambda r: (esc(r["processes"]), "")),
        (("trace (the process shown)", "l"), lambda r: (trace_cell(r), "l"))]
    # columns that are zero in every row are folded away, with one line saying which and why
    source = {"GPU ms": "gpu_busy_inherited_ns", "GPU %": "gpu_busy_inherited_ns", "same-thread ms": "gpu_busy_ns",
              "kernel ms": "kernel_ns", "comm ms": "comm_ns", "mem peak": "mem_peak_bytes"}
    empty = [h[0] for h, _ in cols if h[0] in source and _zero([r.get(source[h[0]]) for r in recs])]
    cols = [c for c in cols if c[0][0] not in empty]
    folded = (f'<p class="note folded">Left out: {", ".join(empty)}: zero or unknown in every row'
              f'{" (no GPU work was recorded: a CPU-only capture)" if {"GPU ms", "kernel ms"} <= set(empty) else ""}'
              '.</p>' if empty else "")
    which = f"step {esc(step)}" if step is not None else "the summarized step"
    return (f"<h2>Stages of {which} (per role: the process with the slowest step, split so the rows "
            "add up)</h2>"
            "<p class=note>A stage's wall is the union of its ranges on the process (nested ranges "
            "counted once); <b>other</b> is the step minus the stages. <b>GPU ms</b> is the inherited "
            "figure: GPU work launched from the stage's ranges, their worker threads included; "
            "<b>same-thread</b> is NVIDIA's rule (only work launched on the range's own thread). "
            "<b>GPU %</b> is GPU ms over the launch span (from each range's start to the end of the last "
            "GPU work it launched), so work that outlives its range never takes it past 100%; "
            "<b>other</b> is no range and has none.</p>"
            + folded + table([h for h, _ in cols], [[c(r) for _, c in cols] for r in recs]))


def _zero(values: list[Any]) -> bool:
    """Every value null or 0: a column that says nothing (a CPU-only capture's GPU columns)."""
    return all(isnull(v) or not float(v) for v in values)


def _trace_table(traces: Mapping[str, TraceFiles], sources: Mapping[ProcKey, list[str]],
                 limit: int | None = None) -> str:
    """The window traces; past `limit` sources only the first `limit` (every process links its own
    trace in the collapsed all-processes table)."""
    more = ""
    if limit is not None and len(traces) > limit:
        more = (f'<p class="note">{len(traces) - limit:,} more window traces: each process links its own in '
                '<a href="#all-processes">the table of all processes</a>.</p>')
        traces = dict(list(traces.items())[:limit])
    return _trace_rows(traces, sources) + more


def _trace_rows(traces: Mapping[str, TraceFiles], sources: Mapping[ProcKey, list[str]]) -> str:
    procs_of: dict[str, list[str]] = {}
    for key, srcs in sources.items():
        for s in srcs:
            procs_of.setdefault(s, []).append(_short_label(key[1], key[2], key[3]))
    return '<h2 id="traces">Window traces</h2>' + TRACE_NOTE + table(
        [("process", "l"), ("source", "l"), ("kind", "l"), ("events", ""), ("Chrome trace", "l"),
         ("nsys SQLite", "l")],
        [[(esc(", ".join(procs_of.get(t.source, []))), "l"),
          (f'<span title="{esc(t.source)}">{esc(t.source)}</span>', "k"), (esc(t.kind), "l"),
          (f"{t.events:,}" if t.events is not None else "", ""),
          (f'<a href="{esc(t.chrome)}">{esc(leaf(t.chrome))}</a> {esc(fmt_bytes(t.sizes.get("chrome")))}'
           if t.chrome else "", "l"),
          (f'<a href="{esc(t.sqlite)}">.sqlite</a> {esc(fmt_bytes(t.sizes.get("sqlite")))}'
           if t.sqlite else "", "l")]
         for t in traces.values()])


def _kernel_table(kernels_rows: Any, top: int) -> str:
    kt = compare.kernel_totals(kernels_rows)
    head = f"<h2>Top {top} kernels (per step, all processes)</h2>"
    if kt.empty:
        return head + "<p>No kernel rows.</p>"
    grand = float(kt["total_ns"].sum()) or 1.0
    rows = kt.head(top).to_dict("records")
    names = kernel_labels([(r["kernel"], r["kernel_short"]) for r in rows])
    return head + table(
        [("kernel", "l"), ("category", "l"), ("count", ""), ("total ms", ""), ("share", "")],
        [[(f'<span title="{esc(r["kernel"])}">{esc(name)}</span>', "k"),
          (esc(r["category"]), "l"), (f'{int(r["count"]):,}', ""), (fmt_ms(r["total_ns"]), ""),
          (f'{100 * r["total_ns"] / grand:.1f}%', "")] for r, name in zip(rows, names)])


def render_bundle_report(bundle: str | Path, *, title: str | None = None, top: int = 20) -> str:
    """The page of a finished bundle folder (manifest.json, summaries/, traces/)."""
    b = Path(bundle)
    try:
        manifest = json.loads((b / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInputError(b / "manifest.json", f"not a readable bundle manifest ({type(exc).__name__})") from None

    def table_of(name: str) -> pd.DataFrame:
        """Strings as Python objects: the views walk rows as dicts, and pandas' Arrow-backed string
        columns made that the largest cost of a 10,240-rank page."""
        p = b / "summaries" / f"{name}.parquet"
        if not p.is_file():
            return pd.DataFrame()
        df = pq.read_table(p).to_pandas()
        for c in df.columns:
            if str(df[c].dtype) in ("str", "string"):
                df[c] = df[c].astype(object)
        return df
    return render_run_report(table_of("phases"), table_of("kernels"), manifest, steps_rows=table_of("steps"),
                             bundle=b, title=title, top=top, ranks_rows=table_of("ranks"))

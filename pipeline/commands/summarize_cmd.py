"""`verlprof summarize BUNDLE_OR_RUN... -o OUT`: compare many runs side by side.

Why a thin command: all the work is in `pipeline/batch.py` (testable without a terminal); this
module parses flags, picks the executor (process pool by default, Ray tasks with `--ray`), draws the
progress and the final rich tables, and turns "nothing usable" into a one-line error.

Exit codes follow collect's: 0 every run summarized and complete; 3 outputs written but some runs
were skipped or are incomplete (their bundle's manifest records failed artifacts); 4 none could be
summarized; 2 bad usage (an input that is not there, an output place that cannot be written). `--strict` makes 3 a failure without outputs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer

from ..workers import jobs_option
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...stages.core.errors import IncompleteRunError, NothingSummarizedError, VerlprofError
from .words import plural
from .wrap import fit_lines


def _none_of(n: int) -> str:
    return "the input could not be summarized" if n == 1 else f"none of the {n} inputs could be summarized"


def _fmt_ms(ns: Any) -> str:
    from ..report_html import fmt_ms

    return fmt_ms(ns)


def metric_label(metric: str) -> str:
    """A metric as the terminal shows it, named by the unit its values are printed in: `wall_ms`,
    `gpu_busy_inherited_ms`, `mem_peak_MB` (never `wall_ns` beside a value in ms); one word, so
    a change line wraps around it, never through it."""
    if metric == "mem_peak_bytes":
        return "mem_peak_MB"
    return metric.removesuffix("_ns") + "_ms"


def _value(v: Any, metric: str) -> str:
    if metric == "mem_peak_bytes":
        return "–" if v is None else f"{v / 2**20:,.0f}"
    return _fmt_ms(v)


def flagged_lines(result: Any, limit: int = 12) -> list[str]:
    """The changes above the noise, every metric (wall, GPU, memory), largest relative first."""
    df = result.compare
    if df is None or df.empty or "flagged" not in df.columns:
        return []
    f = df[df["flagged"].fillna(False).astype(bool)]
    f = f.reindex(f["delta_rel"].abs().sort_values(ascending=False).index).head(limit)
    out = []
    for r in f.to_dict("records"):
        role = r["role"] if isinstance(r["role"], str) else "-"
        rel = r["delta_rel"]   # null where the baseline is 0: a relative change has no meaning
        rel = "from 0" if rel is None or rel != rel else f"{rel:+.1%}"
        out.append(f"  {r['run']}: {r['stage']} ({role}) {metric_label(r['metric'])} {_value(r['baseline_ns'], r['metric'])} -> "
                   f"{_value(r['value_ns'], r['metric'])} ({rel})")
    return (["changes above the noise (steps 2..N spread, else 5% and 0.1 ms):"] + out) if out else \
        ["no change above the noise (steps 2..N spread, else 5% and 0.1 ms)"]


def fitted(lines: list[str], width: int, indent: int = 2) -> list[Text]:
    """`lines` (plain text, no markup) fitted to `width` columns by commands/wrap.fit_lines:
    continuations indented `indent` past the line's own indent, names kept whole, never a number
    cut from its unit or from the `-> value` it changed to."""
    out: list[Text] = []
    for ln in lines:
        lead = len(ln) - len(ln.lstrip(" "))
        out += fit_lines(Text(ln), width, lead + indent)
    return out


#: Table columns: each cell has one space of padding either side, and every column one border.
_CELL_EDGES = 3
_NAME_CAP = 24      # a stage or role name longer than this folds (rare); shorter ones stay whole
_HEAD_CAP = 12      # a run id longer than this folds in its column's head rather than widen it


def _longest_word(texts: list[str]) -> int:
    return max((len(w) for t in texts for w in t.split()), default=1)


def comparison_view(result: Any, metric: str = "wall_ns", max_runs: int = 8, width: int = 80) -> list[Any]:
    """The terminal view: its title lines, then per (stage, role) the baseline value and each
    run's value and change.

    It fits `width` columns with widths chosen here (rich would otherwise shrink every column
    alike, cutting numbers): a name column as wide as its longest name (up to `_NAME_CAP`), a
    value column never narrower than its longest number, so a value and its change wrap apart
    only at the space between them, and wider where room is left; the runs that do not fit are
    left out and counted in the title (compare.parquet holds them all)."""
    from ..report_html import fmt_rel, isnull

    df = result.compare
    df = df[df["metric"] == metric]
    runs = [r.run for r in result.ok]
    others = [r for r in runs if r != result.baseline][:max_runs]
    rows: list[tuple[str, str, str, dict[str, str]]] = []
    for (stage, role), grp in df.groupby(["stage", "role"], sort=False, dropna=False):
        by_run = {r["run"]: r for r in grp.to_dict("records")}
        base = grp["baseline_ns"].iloc[0]
        cells: dict[str, str] = {}
        for run in others:
            rec = by_run.get(run)
            if rec is None or isnull(rec["value_ns"]):
                cells[run] = "–"
                continue
            d = rec["delta_ns"]
            flagged = bool(rec.get("flagged", True))
            style = "" if isnull(d) or d == 0 or not flagged else ("red" if d > 0 else "green")
            rel = fmt_rel(rec["delta_rel"]) if flagged or isnull(d) else "noise"
            txt = f"{_value(rec['value_ns'], metric)} ({rel})"
            cells[run] = f"[{style}]{txt}[/]" if style else txt
        rows.append((str(stage), "" if isnull(role) else str(role),
                     _value(None if isnull(base) else base, metric), cells))

    def column(head: str, texts: list[str]) -> tuple[int, int]:
        """(narrowest, widest) width of a value column: its longest number, its whole cells."""
        least = max(_longest_word(texts), min(len(head), _HEAD_CAP))
        return least, max(least, max((len(t) for t in texts), default=1), min(len(head), _HEAD_CAP))

    names = [min(_NAME_CAP, _longest_word([r[i] for r in rows] + [h])) for i, h in ((0, "stage"), (1, "role"))]
    base = column(result.baseline, [r[2] for r in rows])
    used = 1 + sum(names) + base[1] + 3 * _CELL_EDGES
    shown: list[tuple[str, tuple[int, int]]] = []
    for run in others:
        need = column(run, [Text.from_markup(r[3][run]).plain for r in rows])
        if shown and used + need[0] + _CELL_EDGES > width:
            break
        shown.append((run, need))
        used += need[0] + _CELL_EDGES
    widths = [need[0] for _, need in shown]
    for i, (_run, need) in enumerate(shown):          # room left: whole cells on one line, in order
        grow = min(need[1] - widths[i], max(0, width - used))
        widths[i] += grow
        used += grow
    unit = "MB" if metric == "mem_peak_bytes" else "ms"
    title = (f"{metric.removesuffix('_ns')} per step ({unit}), baseline {result.baseline}; "
             "a change is coloured only above the noise"
             + (f"; first {len(shown)} of {len(others)} other runs shown (all: compare.parquet)"
                if len(shown) < len(others) else ""))
    t = Table()
    t.add_column("stage", width=names[0], overflow="fold")
    t.add_column("role", width=names[1], overflow="fold")
    t.add_column(f"{result.baseline}", justify="right", width=base[1], overflow="fold")
    for (run, _need), w in zip(shown, widths):
        t.add_column(run, justify="right", width=w, overflow="fold")
    for stage, role, base_value, cells in rows:
        t.add_row(stage, role, base_value, *(cells[run] for run, _ in shown))
    return [*fitted([title], width), t]


def status_lines(result: Any, width: int = 80) -> list[Text]:
    """One line per run (name, status), and the why of a skipped or incomplete run below it, as
    collect draws its artifacts: fitted to `width`, names whole, counts beside their nouns."""
    colors = {"done": "green", "cached": "cyan", "skipped": "yellow", "incomplete": "bold yellow"}
    names = [r.run + (" (baseline)" if r.run == result.baseline else "") for r in result.runs]
    name_w = min(max((len(n) for n in names), default=0), max(12, width // 2))
    out: list[Text] = [Text("runs:", style="bold")]
    for r, name in zip(result.runs, names):
        status = "incomplete" if r.incomplete else r.status
        detail = r.detail
        if r.incomplete:
            shown = "; ".join(r.failed[:3]) + (f"; and {len(r.failed) - 3} more" if len(r.failed) > 3 else "")
            detail = f"{plural(len(r.failed), 'artifact')} failed in its collect: {shown}"
        out += fit_lines(Text.assemble(f"  {name:<{name_w}}  ", (status, colors.get(status, ""))), width, 4)
        if detail:
            out += [Text("    ") + piece
                    for piece in fit_lines(Text.assemble(("└ ", "dim"), detail), width - 4, 2)]
    return out


_EPILOG = ("Exit codes: 0 every run summarized and complete; 3 outputs written but some runs were skipped or "
           "are incomplete (listed; --strict: no outputs); 4 none could be summarized; 2 bad usage.\n\n"
           "Example: verlprof summarize /tmp/run-a /tmp/run-b -o /tmp/compare --baseline run-a --html")


def register(app: typer.Typer) -> None:
    @app.command("summarize", epilog=_EPILOG)
    def summarize(
        inputs: List[Path] = typer.Argument(..., metavar="BUNDLE_OR_RUN...",
                                            help="collect outputs (bundles) or raw run folders (collected first)"),
        out: Path = typer.Option(..., "-o", "--out", help="output folder"),
        baseline: Optional[str] = typer.Option(None, "--baseline", help="run id, input path or 1-based position (default: the first usable run)"),
        html: bool = typer.Option(False, "--html", help="also write OUT/report.html (static, offline)"),
        ray: bool = typer.Option(False, "--ray", help="run the per-run work as Ray tasks on the running cluster (address auto)"),
        ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDRESS",
                                                  help="Ray cluster address (implies --ray); `local` starts a private local Ray"),
        jobs: Optional[int] = jobs_option(),
        work: Optional[Path] = typer.Option(None, "--work", help="work/cache dir (default $VERLPROF_CACHE or ~/.cache/verlprof)"),
        top_changes: int = typer.Option(20, "--top-changes", min=1, help="kernel changes kept per run (the kernels whose time changed most)"),
        metric: str = typer.Option("wall_ns", "--metric", help="metric of the terminal table: wall_ns, gpu_busy_inherited_ns, gpu_busy_ns, kernel_ns, comm_ns, mem_peak_bytes"),
        noise_rel: float = typer.Option(0.05, "--noise-rel", min=0.0, help="a change must exceed this share of the baseline (when one steady step was profiled)"),
        noise_ms: float = typer.Option(0.1, "--noise-ms", min=0.0, help="... and this many ms (when one steady step was profiled)"),
        fresh: bool = typer.Option(False, "--fresh", help="ignore cached per-run results"),
        strict: bool = typer.Option(False, "--strict",
                                    help="a skipped or incomplete run fails the batch: no outputs (exit 3)"),
    ) -> None:
        """Compare many runs: stacked tables, per-stage deltas against a baseline, optional HTML."""
        from ...stages.core.done_records import default_work_dir
        from .. import batch, compare
        from ..executors import make_executor
        from ..progress import err_console

        if metric not in compare.COMPARED:
            raise VerlprofError(None, f"--metric must be one of {', '.join(compare.COMPARED)}, not {metric!r}")
        from ..output_places import OutputPlace, check_not_inputs, check_output_places

        for given in inputs:          # as collect: a SOURCE that is not there is bad usage (exit 2)
            if not given.expanduser().exists():
                raise VerlprofError(given, "no such file or folder")
        work_dir = work or default_work_dir()
        check_not_inputs(inputs, OutputPlace(out, "-o"), OutputPlace(work_dir, "--work"))
        check_output_places(OutputPlace(out, "-o"), OutputPlace(work_dir, "--work"))
        address = ray_address if ray_address is not None else ("auto" if ray else None)
        executor = make_executor(jobs, ray_address=address)
        expect = getattr(executor, "expect", None)
        if expect is not None:   # no more workers than runs (pipeline/workers.py)
            expect(len(inputs))
        if fresh:
            batch.clear_cache(work_dir)
        done = 0

        def progress(st: batch.RunStatus) -> None:
            nonlocal done
            done += 1
            if err_console.is_terminal:
                err_console.print(f"[dim]{done}/{len(inputs)}[/] {st.run}: {st.status}")

        from .. import signals

        stopped = False
        with signals.stopped_cleanly(out, work_dir):   # SIGINT/SIGTERM: as collect (exit 130/143)
            try:
                result = batch.summarize_runs(inputs, out, baseline=baseline, executor=executor,
                                              work_dir=work_dir, html=html, top_kernels=top_changes,
                                              on_done=progress, strict=strict, noise_rel=noise_rel,
                                              noise_abs_ns=int(noise_ms * 1e6))
            except signals.Interrupted:
                stopped = True
                raise
            finally:
                close = getattr(executor, "close", None)
                if close:
                    close(kill=True) if stopped else close()
        console = Console()   # made per run, as collect's: the terminal's width now, not at import
        width = console.width
        if result.compare is not None:
            for part in comparison_view(result, metric, width=width):
                console.print(part, highlight=False)
            for ln in fitted(flagged_lines(result), width):
                console.print(ln, highlight=False)
        for ln in status_lines(result, width):
            console.print(ln, highlight=False)
        if not result.ok:
            raise NothingSummarizedError(None, f"{_none_of(len(inputs))} (see the table above)")
        bad = [r.run for r in result.skipped] + [r.run for r in result.incomplete]
        line = (f"{plural(len(result.runs), 'run')}: {len(result.ok) - len(result.incomplete)} summarized, "
                f"{len(result.incomplete)} incomplete, {len(result.skipped)} skipped")
        for ln in fitted([line + (f": {', '.join(bad)}" if bad else "")], width):
            console.print(ln, highlight=False)
        if strict and result.exit_code:
            raise IncompleteRunError(None, f"--strict: {plural(len(bad), 'run')} skipped or incomplete "
                                           f"({', '.join(bad)}); no outputs written")
        for ln in fitted([f"wrote {', '.join(p.name for p in result.outputs.values())} to {out}"], width):
            console.print(ln, highlight=False)
        if result.exit_code:
            raise typer.Exit(result.exit_code)

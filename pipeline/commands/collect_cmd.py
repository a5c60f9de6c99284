"""`verlprof collect`: every stage over one run; a bundle that is safe to share."""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from ...stages.core.done_records import default_work_dir
from ...stages.core.errors import VerlprofError
from ..collect import CollectOptions, CollectResult, run_collect
from ..progress import stage_progress

_MAX_SOURCE_TABLES = 6  # phase tables printed; the rest are in summaries/phases.parquet


def register(app: typer.Typer) -> None:
    app.command("collect")(collect)


def collect(
    sources: Optional[list[Path]] = typer.Argument(
        None, help="Run folders or files. Default: the newest Ray session's logs/nsight and ./outputs/profile."),
    out: Path = typer.Option(..., "-o", "--out", help="Bundle folder to write (safe to share)."),
    work: Optional[Path] = typer.Option(
        None, "--work", help="Cache for raw exports (holds secrets; never inside OUT). Default $VERLPROF_CACHE or ~/.cache/verlprof."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="Parallel workers (default: cores)."),
    nsys: Optional[str] = typer.Option(None, "--nsys", envvar="VERLPROF_NSYS", help="nsys binary to export reports with."),
    step: str = typer.Option("2", "--step", help="Steady-state step to summarize: N or 'auto'."),
    top: int = typer.Option(50, "--top", help="Top kernels per phase in kernels.parquet."),
    html: bool = typer.Option(False, "--html", help="Also write report.html."),
    pack: bool = typer.Option(False, "--pack", help="Also write OUT.tar.gz with SHA256SUMS."),
    ray: bool = typer.Option(False, "--ray", help="Collect on every node of the running Ray cluster (address auto)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDRESS",
                                              help="Ray cluster address (implies --ray)."),
) -> None:
    """Gather, export, scrub, window and summarize one verl run into OUT."""
    from ...stages.gather import default_sources

    srcs = list(sources or [])
    if ray or ray_address:
        _collect_on_cluster(ray_address or "auto", srcs, out, work, jobs, nsys, step, top)
        return
    if not srcs:
        srcs = default_sources()
        if not srcs:
            raise VerlprofError(None, "no SOURCE given and no Ray nsight folder or ./outputs/profile found")
    step_arg: int | str = "auto" if step == "auto" else _int_step(step)
    opts = CollectOptions(sources=srcs, out=out, work_dir=work or default_work_dir(), jobs=jobs, nsys=nsys,
                          step=step_arg, top=top, html=html, pack=pack)
    with stage_progress() as progress:
        result = run_collect(opts, progress)
    print_collect_table(result, Console())


def _collect_on_cluster(address: str, sources: list[Path], out: Path, work: Path | None, jobs: int | None,
                        nsys: str | None, step: str, top: int) -> None:
    """One task per alive Ray node collects that node's files there; only bundles travel back."""
    from .. import cluster

    options = {"work_dir": str(work) if work else None, "jobs": jobs, "nsys": nsys,
               "step": "auto" if step == "auto" else _int_step(step), "top": top}
    results = cluster.collect_on_nodes(address, [str(s) for s in sources], options)
    cluster.merge_node_bundles(results, out)
    table = Table(title=f"verlprof collect --ray -> {out.name}")
    for col in ("node", "status", "files", "seconds", "detail"):
        table.add_column(col, overflow="fold")
    for r in results:
        table.add_row(r.node, r.status, str(r.files), f"{r.seconds:.1f}", r.detail)
    Console().print(table)


def _int_step(step: str) -> int:
    try:
        n = int(step)
    except ValueError:
        raise VerlprofError(None, f"--step must be a number or 'auto', not {step!r}") from None
    if n < 1:
        raise VerlprofError(None, "--step counts from 1")
    return n


def print_collect_table(result: CollectResult, console: Console) -> None:
    """What was found, exported, scrubbed, skipped and why; then the chosen step's phases."""
    table = Table(title=f"verlprof collect -> {result.out.name}", title_justify="left")
    table.add_column("artifact", overflow="fold", ratio=3)
    table.add_column("kind", no_wrap=True)
    table.add_column("role/rank", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("export", no_wrap=True)
    table.add_column("scrub", no_wrap=True)
    table.add_column("note", overflow="fold", ratio=2)
    by_art: dict[str, dict[str, tuple[str, str]]] = {}
    for o in result.outcomes:
        by_art.setdefault(o.artifact, {})[o.stage] = (o.status, o.detail)
    for a in result.artifacts:
        st = by_art.get(a.rel, {})
        notes = [d.split(": ", 1)[-1] for s_, (stat, d) in st.items()
                 if stat in ("failed", "skipped", "refused") and d]
        who = "/".join(x for x in (a.role or "", "" if a.rank is None else f"r{a.rank}") if x)
        table.add_row(a.rel, a.kind.value.replace("nsys_", "").replace("_", " "), who, _size(a.size),
                      st.get("export", ("-", ""))[0], st.get("scrub", ("-", ""))[0], "; ".join(notes))
    console.print(table)
    counts = Counter(o.status for o in result.outcomes if o.stage == "export")
    exported = counts.get("exported", 0)
    parts = [f"{len(result.artifacts)} artifacts", f"{exported} exported"]
    parts += [f"{n} {s}" for s, n in sorted(counts.items()) if s != "exported"]
    if result.skipped:
        reasons = Counter(why.split(" (")[0] for _, why in result.skipped)
        parts.append(f"{len(result.skipped)} other files ignored ("
                     + ", ".join(f"{n} {r}" for r, n in reasons.most_common(3)) + ")")
    console.print(", ".join(parts) + f"; {result.seconds:.1f}s")
    reused = counts.get("cached", 0) + counts.get("beside", 0)
    if reused and exported == 0:
        console.print(f"Exported nothing: {reused} report(s) reused from the export cache or their beside SQLite.")
    window = result.manifest.get("window") or {}
    if window:
        console.print(f"[bold]window[/bold]: {window.get('reason', '')}")
        for w in window.get("warnings", [])[:5]:
            console.print(f"  [yellow]warning[/yellow]: {w}")
    if result.rows and result.rows.get("phases"):
        from ...stages.summarize import render_phase_table

        phases = list(result.rows["phases"])
        sources = list(dict.fromkeys(r.get("source") for r in phases))
        shown = set(sources[:_MAX_SOURCE_TABLES])
        render_phase_table([r for r in phases if r.get("source") in shown], console)
        if len(sources) > len(shown):
            console.print(f"... and {len(sources) - len(shown)} more sources in summaries/phases.parquet")
    if result.doctor:
        from .doctor_cmd import print_findings

        print_findings(result.doctor, console, title="doctor: after-run checks")
    console.print(f"bundle: {result.out}  (safe to share; verified by `verlprof check`)")


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)

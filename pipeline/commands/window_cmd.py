"""`verlprof window INPUT...`: which steps were profiled, and which one is the steady state.

Why a command of its own: before a long collect, a user wants to see the steps each export holds,
their wall times and why step N is the one summarized (step 1 pays start-up costs). With
`--phases` it also summarizes that step and prints the phase table; with `-o DIR` it writes a
bundle of that step through `collect` (summaries under DIR/summaries, no traces): the strings of
the rows come from the raw inputs, so they pass the same scrub and check as any collect.
Inputs are nsys SQLite exports and torch chrome traces (or folders holding them); reports
(`.nsys-rep`) need `collect`, which exports them first.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..workers import jobs_option

from ...stages.core.errors import VerlprofError
from .wrap import fit_lines
from .window_options import step_range_option, top_kernels_option, top_phases_option

def register(app: typer.Typer) -> None:
    app.command("window", epilog="Example: verlprof window samples/tiny_run --phases")(window)


def _inputs(paths: list[Path]) -> list[Path]:
    """SQLite exports and torch traces named on the command line or found in named folders.

    Folders are read the way `collect` reads them (the gather stage): what collect skips (a
    `sample_manifest.json`, logs, JSON that is no chrome trace) is skipped here too, not an error.
    """
    from ...stages.core import formats
    from ...stages.gather import gather
    from ..progress import say_own_outputs

    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            gathered = gather([p], with_hashes=False, find_config=False)
            say_own_outputs(gathered.own_outputs)
            found = gathered.artifacts
            files = sorted(a.path for a in found if formats.for_file_kind(a.kind).reads_directly(a))
            if not files:
                raise VerlprofError(p, "holds no nsys SQLite exports (*.sqlite) or torch traces (*.json[.gz]); "
                                       "run `verlprof collect` on reports")
            out.extend(files)
        elif p.is_file():
            if p.name.endswith(".nsys-rep") or p.name.endswith(".qdstrm"):
                raise VerlprofError(p, "an nsys report: export it first (`nsys export --type sqlite`) or use `verlprof collect`")
            out.append(p)
        else:
            raise VerlprofError(p, "no such file or folder")
    return out


def known_identity(path: Path) -> "object":
    """The identity of one input: from its name, and for an nsys export whose name says no role
    or rank (Ray's `worker_process_<pid>`), from inside it, as collect reads it
    (stages/readers/report_identity.py): `trainer`, `actor_rollout_ref rank 1`, never `role ?`."""
    from ...stages.core import formats
    from ...stages.window import identity_from_path

    ident = identity_from_path(path)
    fmt = formats.get(ident.source_kind)
    if not fmt.wants_identify(ident):
        return ident
    try:
        return fmt.identify(path, ident)
    except VerlprofError:
        return ident          # its own window or summary says what is wrong with it


def parse_step(step: str) -> "int | str":
    """`--step` value: a positive integer or `auto`."""
    s = step.strip().lower()
    if s == "auto":
        return "auto"
    try:
        n = int(s)
    except ValueError:
        raise VerlprofError(None, f"--step must be a step number or 'auto', not {step!r}") from None
    if n < 1:
        raise VerlprofError(None, f"--step must be 1 or more, not {n}")
    return n


def window(
    inputs: list[Path] = typer.Argument(..., help="nsys SQLite exports or torch traces, or folders holding them."),
    step: str = typer.Option("2", "--step", help="Step to summarize: N, or 'auto' (median-duration step after the first)."),
    top: int = top_kernels_option("Top kernels per phase (with -o)."),
    top_phases: int = top_phases_option("Phases per process shown with --phases."),
    step_range: Optional[str] = step_range_option(),
    phases: bool = typer.Option(False, "--phases", help="Also summarize the chosen step and print its phases."),
    out: Optional[Path] = typer.Option(None, "-o", "--out",
                                       help="Write the chosen step as a checked bundle (DIR/summaries/*.parquet), as collect does."),
    jobs: Optional[int] = jobs_option(),
) -> None:
    """Find the profiled steps in every input and choose the steady-state one."""
    from rich.console import Console
    from rich.table import Table

    from ...stages.summarize import (
        SummarizeOptions,
        render_phase_table,
        steps_rows,
    )
    from ...stages.window import identity_from_path, pick_window, source_steps_item
    from ..executors import make_executor
    from ..stage_runs import summarize_sources

    if out is not None:
        from ...stages.core.done_records import default_work_dir
        from ..output_places import OutputPlace, check_not_inputs, check_output_places

        check_not_inputs(inputs, OutputPlace(out, "-o", inside=False))
        check_output_places(OutputPlace(out, "-o", inside=False), OutputPlace(default_work_dir(), "work dir"))
    from .. import signals

    with signals.stopped_cleanly():   # SIGINT/SIGTERM: workers killed, one line, exit 130/143
        console = Console()
        files = _inputs(inputs)
        idents = [(p, known_identity(p)) for p in files]
        from ...stages.window import compile_step_range

        compile_step_range(step_range)
        options = SummarizeOptions(step=parse_step(step), top=top, step_range=step_range,  # type: ignore[arg-type]
                                   top_phases=top_phases)
        if phases:
            res = summarize_sources(idents, options, make_executor(jobs))
            resolved, choice, rows = res.sources, res.choice, res.rows
            for source, err in res.errors:
                console.print(f"[yellow]skipped {source}: {err}[/yellow]")
        else:
            win = pick_window([source_steps_item((str(p), ident), options) for p, ident in idents], options.step)
            resolved, choice = list(win.sources), win.choice
            rows = {"steps": steps_rows(resolved, choice)}
        t = Table(title="profiled steps", title_justify="left")
        for col in ("source", "pid", "step", "wall ms", "boundary", "chosen", "flags"):
            t.add_column(col, justify="right" if col in ("pid", "step", "wall ms") else "left")
        for src in resolved:
            for s in sorted(src.steps, key=lambda s: (s.pid or 0, s.step)):
                t.add_row(src.ident.source, str(s.pid or ""), str(s.step), f"{s.wall_ns / 1e6:,.1f}", s.boundary,
                          "yes" if s.step == choice.step else "", ", ".join(s.flags))
        console.print(t)
        for line in fit_lines(f"window: {choice.reason}", console.width, indent=2):   # `99.8 ms` stays whole
            console.print(line, highlight=False)
        for w in choice.warnings:
            console.print(f"[yellow]warning: {w}[/yellow]")
        if phases and rows.get("phases"):
            render_phase_table(rows["phases"], console, top_phases)
        if out is not None:
            _write_bundle(inputs, out, options, jobs, console)


def _write_bundle(inputs: list[Path], out: Path, options: "object", jobs: Optional[int], console: "object") -> None:
    """`-o DIR`: the same collect (scrub of every published string, check, atomic publish) without
    window traces; the exit code follows collect's."""
    from ..collect import CollectOptions, run_collect

    opts = CollectOptions(sources=list(inputs), out=out, jobs=jobs, step=options.step, top=options.top,
                          step_range=options.step_range, traces=False)
    result = run_collect(opts)
    console.print(f"wrote {out / 'summaries'} (scrubbed, verified by `verlprof check`)")
    if result.exit_code:
        raise typer.Exit(result.exit_code)

"""`verlprof collect`: every stage over one run; a bundle that is safe to share.

Why the exit code matters here: collect runs from post-run hooks and CI, where the status is all a
script reads. 0: every artifact summarized; 3: bundle written, some artifacts failed (listed); 4:
nothing summarized, no bundle; 2: bad usage; 1: `check` refused to publish. `--strict` makes 3 a
failure without a bundle.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from ..workers import jobs_option
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...stages.core import formats
from ...stages.core.done_records import default_work_dir
from ...stages.core.errors import NothingSummarizedError, RunFailedError, VerlprofError
from ...stages.core.model import DONE, FAILED, REUSED, SKIPPED
from ...stages.gather import unreadable
from ..progress import stage_progress
from .window_options import step_range_option, top_kernels_option, top_phases_option
from .words import plural
from .wrap import fit_lines, fit_plain

if TYPE_CHECKING:   # collect imports every stage; `verlprof --help` and the other commands need none
    from ..collect import CollectResult

_MAX_SOURCE_TABLES = 6  # phase tables printed; the rest are in summaries/phases.parquet
_EPILOG = ("Exit codes: 0 every artifact summarized; 3 bundle written but some artifacts failed (listed; "
           "--strict: no bundle); 4 nothing could be summarized (no bundle); 2 bad usage; "
           "1 refused to publish: `verlprof check` found something.\n\n"
           "Example: verlprof collect samples/tiny_run -o /tmp/out --html --pack")


def register(app: typer.Typer) -> None:
    app.command("collect", epilog=_EPILOG)(collect)


def collect(
    sources: Optional[list[Path]] = typer.Argument(
        None, help="Run folders or files. Default: the newest Ray session's logs/nsight and ./outputs/profile."),
    out: Path = typer.Option(..., "-o", "--out", help="Bundle folder to write (safe to share)."),
    work: Optional[Path] = typer.Option(
        None, "--work", help="Cache for raw exports (holds secrets; never inside OUT). Default $VERLPROF_CACHE or ~/.cache/verlprof."),
    jobs: Optional[int] = jobs_option(),
    nsys: Optional[str] = typer.Option(None, "--nsys", envvar="VERLPROF_NSYS", help="nsys binary to export reports with."),
    step: str = typer.Option("2", "--step", help="Steady-state step to summarize: N or 'auto'."),
    top: int = top_kernels_option(),
    top_phases: int = top_phases_option(),
    step_range: Optional[str] = step_range_option(),
    html: bool = typer.Option(False, "--html", help="Also write report.html."),
    pack: bool = typer.Option(False, "--pack", help="Also write OUT.tar.gz with SHA256SUMS."),
    ray: bool = typer.Option(False, "--ray", help="Collect on every node of the running Ray cluster (address auto)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDRESS",
                                              help="Ray cluster address (implies --ray)."),
    per_rank: bool = typer.Option(False, "--per-rank", help="Also print one phase table per rank (default: per role, across ranks)."),
    strict: bool = typer.Option(False, "--strict",
                                help="Any failed artifact fails the run: no bundle is written (exit 3)."),
    noise_floor: str = typer.Option("5%,1ms", "--noise-floor", metavar="SHARE,TIME",
                                    help="Below this no rank is named culprit: its excess must exceed a share "
                                         "of the phase, a time and (third part, default 5%) a share of the step; "
                                         "and it must recur in most profiled steps (docs/summaries.md)."),
    keep_names: Optional[Path] = typer.Option(
        None, "--keep-names", help="User-written strings you approve (one a line; the review list, edited down, "
                                   "is such a file): published as they are instead of as pseudonyms."),
) -> None:
    """Gather, export, scrub, window and summarize one verl run into OUT (exit codes below)."""
    from ..rank_inputs import parse_noise_floor   # no pandas before the run (issue 30)

    try:
        parse_noise_floor(noise_floor)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--noise-floor") from None
    from ..collect import CollectOptions, run_collect
    from ..output_places import OutputPlace, check_not_inputs, check_output_places

    work_dir = work or default_work_dir()
    check_output_places(OutputPlace(out, "-o", inside=False), OutputPlace(work_dir, "--work"))
    srcs = list(sources or [])
    address = (ray_address or "auto") if (ray or ray_address) else None
    console = Console()
    if not srcs and address is None:
        srcs, said = default_sources_said()
        console.print(said, markup=False, highlight=False, soft_wrap=True)   # paths stay whole
    check_not_inputs(srcs, OutputPlace(out, "-o", inside=False), OutputPlace(work_dir, "--work"))
    step_arg: int | str = "auto" if step == "auto" else _int_step(step)
    # --ray: the same collect; each node's own nsight folder (plus any SOURCE that exists there) is
    # gathered on that node, and every input is read only on the node that holds it.
    from ...stages.scrub import closing_line as names_line, read_keep_names

    opts = CollectOptions(sources=srcs, out=out, work_dir=work_dir, jobs=jobs, nsys=nsys,
                          step=step_arg, top=top, html=html, pack=pack, strict=strict,
                          step_range=_step_range(step_range), ray=address, noise_floor=noise_floor,
                          keep_names=read_keep_names(keep_names) if keep_names else ())
    try:
        with stage_progress() as progress:
            result = run_collect(opts, progress)
    except RunFailedError as err:
        if err.result is None:
            raise
        # nothing (or, with --strict, not all) summarized: the table says why, each reason once
        print_collect_table(err.result, console, top_phases, per_rank)
        raise _said_above(err) from None
    print_collect_table(result, console, top_phases, per_rank)
    if pack and result.published:
        from ..pack import default_archive_path

        archive = default_archive_path(result.out)
        if archive.is_file():
            console.print(f"packed: {archive} ({archive.stat().st_size / 1e6:.2f} MB, SHA256SUMS inside)",
                          markup=False, highlight=False, soft_wrap=True)
    if result.review_list is not None:
        for piece in fit_plain(names_line(result.named, result.review_list), console.width):
            console.print(piece, markup=False, highlight=False, crop=False, no_wrap=True, overflow="ignore")
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def exported_nothing_line(cached: int, beside: int, exported: int) -> str | None:
    """Why no report was exported, in the words of what happened: read from the SQLite export
    lying beside it (a first run of a folder nsys exported), or reused from the export cache (a
    re-run). None when something was exported or there was nothing to export."""
    if exported or not (cached or beside):
        return None
    parts = []
    if beside:
        parts.append(f"{plural(beside, 'report')} read from the SQLite export beside it")
    if cached:
        parts.append(f"{plural(cached, 'report')} reused from the export cache (an earlier run)")
    return "Exported nothing: " + "; ".join(parts) + "."


def default_sources_said(cwd: Path | None = None) -> tuple[list[Path], str]:
    """Where verl writes (collect with no SOURCE), and one line saying where it looked, in absolute
    paths: the newest Ray session's `logs/nsight` (which session) and `./outputs/profile`.

    Why say it: the newest session may be a leftover of another job, and a relative name printed
    later means nothing to a user who is not standing where collect ran. Raises (exit 2) when
    neither place exists, naming both."""
    from ...stages.gather import default_sources, ray_nsight_dir, ray_temp_dirs

    here = Path(cwd or Path.cwd()).absolute()
    srcs = default_sources(cwd=here)
    nsight = ray_nsight_dir()
    profile = here / "outputs" / "profile"
    ray_dirs = ", ".join(dict.fromkeys(str(d) for d in ray_temp_dirs() if d.name == "ray"))
    found, missing = [], []
    if nsight is not None:
        found.append(f"the newest Ray session's {nsight}")
    else:
        missing.append(f"no Ray session with logs/nsight in {ray_dirs}")
    if profile.is_dir():
        found.append(f"./outputs/profile ({profile})")
    else:
        missing.append(f"no ./outputs/profile ({profile})")
    if not srcs:
        raise VerlprofError(None, f"no SOURCE given, and nothing where verl writes: {'; '.join(missing)}; "
                                  "give the run's folders as SOURCE")
    return srcs, f"no SOURCE given: reading {' and '.join(found)}" + "".join(f"; {m}" for m in missing)


def _said_above(err: RunFailedError) -> RunFailedError:
    """The closing error once the table was printed: counts and `listed above`, so no reason (nsys's
    install advice, say) is said again for every file on the second stream."""
    result = err.result
    failed = result.with_status(FAILED)
    if not failed:
        return err
    names = ", ".join(s.rel for s in failed[:3]) + (f" and {len(failed) - 3} more" if len(failed) > 3 else "")
    what = f"{len(failed)} of {plural(len(result.statuses), 'artifact')} failed ({names}: why is said above)"
    lead = "--strict" if not isinstance(err, NothingSummarizedError) else "nothing could be summarized"
    return type(err)(None, f"{lead}: {what}; no bundle written", result)


def _int_step(step: str) -> int:
    try:
        n = int(step)
    except ValueError:
        raise VerlprofError(None, f"--step must be a number or 'auto', not {step!r}") from None
    if n < 1:
        raise VerlprofError(None, "--step counts from 1")
    return n


def _step_range(pattern: str | None) -> str | None:
    """`--step-range` checked before any work starts (a bad regex is a one-line error)."""
    from ...stages.window import compile_step_range

    compile_step_range(pattern)
    return pattern


#: Chosen steps of one run start within seconds of each other on every rank; this far apart they
#: are two runs (or one clock is wrong), and one timeline over them is mostly empty axis.
_APART_NS = 60 * 10**9
_EPOCH_2001_NS = 10**18     # a start_ns below this is relative to its own trace, not wall-clock


def clocks_apart_warning(steps: list[dict[str, Any]]) -> str | None:
    """One line when the chosen step of the sources starts minutes apart (wall-clock starts only):
    two unrelated runs given to one collect would otherwise draw a 300,000 ms axis silently."""
    starts: dict[str, int] = {}
    for r in steps:
        s = r.get("start_ns")
        if r.get("chosen") and isinstance(s, int) and s >= _EPOCH_2001_NS:
            src = str(r.get("source"))
            starts[src] = min(s, starts.get(src, s))
    if len(starts) < 2:
        return None
    first, last = min(starts, key=starts.__getitem__), max(starts, key=starts.__getitem__)
    gap = starts[last] - starts[first]
    if gap <= _APART_NS:
        return None
    first, last = (shorten(Path(s).name, 36) for s in (first, last))
    return (f"the chosen step starts {_duration(gap)} apart across sources ({first} first, {last} last): "
            "two different runs given to one collect? Collect each run on its own; the cross-rank "
            "timeline (all_ranks.trace.json.gz) is mostly empty axis")


def _duration(ns: int) -> str:
    s = ns / 1e9
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h" if s < 172800 else f"{s / 86400:.0f} days"


#: More artifacts than this: the list collapses to one line per kind, status and step (issue 23).
_LIST_EACH_ARTIFACT = 16


def print_collect_table(result: CollectResult, console: Console, top_phases: int = 15,
                        per_rank: bool = False) -> None:
    """The artifacts (one row each, or collapsed by kind/status/step past a few, failures always
    by name), the closing line, the window choice, the chosen step's phases per role across ranks
    (pipeline/terminal_views.py; per rank with `per_rank`), doctor's findings and the bundle."""
    from .. import terminal_views

    if len(result.artifacts) <= _LIST_EACH_ARTIFACT:
        for line in artifact_lines(result, console.width):
            console.print(line, overflow="fold", highlight=False, crop=False)
    else:
        for line in terminal_views.artifact_summary(result.statuses, result.artifacts, console.width):
            console.print(line, markup=False, highlight=False, crop=False, overflow="fold")
    say(console, closing_line(result))
    if result.nodes:
        say(console, node_line(result.nodes))
    # what the export stage did (its own word in `info["export"]`: exported, cached, beside, given)
    counts = Counter(o.info.get("export", o.status) for o in result.outcomes if o.stage == "export")
    line = exported_nothing_line(counts.get("cached", 0), counts.get("beside", 0),
                                 counts.get("exported", 0) + counts.get("done", 0))
    if line:
        say(console, line)
    window = result.manifest.get("window") or {}
    if window:
        say(console, f"[bold]window[/bold]: {_esc(window.get('reason', ''))}", indent=2)
        for w in window.get("warnings", [])[:5]:
            say(console, f"  [yellow]warning[/yellow]: {_esc(w)}", indent=4)
    apart = clocks_apart_warning((result.rows or {}).get("steps") or [])
    if apart:
        say(console, f"  [yellow]warning[/yellow]: {_esc(apart)}", indent=4)
    if result.rows and result.rows.get("phases"):
        phases = list(result.rows["phases"])
        ranks_rows = terminal_views.ranks_of_bundle(result.out) if result.published else None
        for line in terminal_views.role_tables(phases, ranks_rows, top=top_phases, width=console.width):
            console.print(line, markup=False, highlight=False, crop=False, overflow="fold")
        if per_rank:
            from ...stages.summarize import render_phase_table

            sources = list(dict.fromkeys(r.get("source") for r in phases))
            shown = set(sources[:_MAX_SOURCE_TABLES])
            render_phase_table([r for r in phases if r.get("source") in shown], console, top_phases)
            if len(sources) > len(shown):
                console.print(f"... and {len(sources) - len(shown)} more sources in summaries/phases.parquet")
            console.print("GPU ms: NVIDIA's same-thread rule; GPU inh. ms: inherited rule (GPU work of the "
                          "range's worker threads included); left: GPU work no rule placed.", highlight=False)
    if result.doctor:
        from .doctor_cmd import print_findings

        print_findings(result.doctor, console, title="doctor: after-run checks")
    if not result.published:
        console.print("[bold red]no bundle written[/bold red] (see the rows above)")
    elif result.with_status(FAILED):
        say(console, f"bundle: {_esc(str(result.out))}  (safe to share; verified by `verlprof check`; "
                     f"[bold yellow]incomplete[/bold yellow]: {plural(len(result.with_status(FAILED)), 'artifact')} "
                     "failed, listed in manifest.json)")
    else:
        say(console, f"bundle: {_esc(str(result.out))}  (safe to share; verified by `verlprof check`)")


_STYLE = {DONE: "green", REUSED: "cyan", SKIPPED: "yellow", FAILED: "bold red"}


def artifact_lines(result: CollectResult, width: int = 80) -> list[Any]:
    """The artifact table as printable lines (rich markup; reasons as indented paragraphs),
    readable at 80 columns.

    Why not a rich Table: with six columns at 80 columns every cell wrapped into a tower of
    4-letter fragments. Here the fixed columns come first (status, size, kind, role/rank), the file
    name fills the rest (grouped under its folder, shortened in the middle, never wrapped), and the
    reason of a row that is not done gets its own indented line below it, the full width wide.
    """
    status_of = {s.rel: s for s in result.statuses}
    shared = _shared_reasons(result)
    notes: dict[str, list[str]] = {}
    for o in result.outcomes:
        if o.stage == "identify" and o.status == "failed":
            notes.setdefault(o.artifact, []).append(f"{o.stage}: {o.detail}")
    whos = {a.rel: " ".join(x for x in ("" if a.rank is None else f"r{a.rank}", a.role or "") if x)
            for a in result.artifacts}
    who_w = min(16, max([3] + [len(w) for w in whos.values()]))
    fixed = 7 + 1 + 9 + 1 + 6 + 1 + who_w + 1
    name_w = width - fixed - 3
    # Narrow terminal (60 columns): a name squeezed beside the fixed columns would be cut to a few
    # letters or folded apart; it gets its own line below its row instead, the width wide.
    narrow = name_w < 30
    if narrow:
        name_w = max(20, width - 4)
    lines: list[Any] = [f"[bold]verlprof collect -> {_esc(result.out.name)}[/bold]",
                        f"[dim]{'status':7} {'size':>9} {'kind':6} "
                        + ("who[/dim]" if narrow else f"{'who':{who_w}}   artifact[/dim]")]
    folder = None
    for a in sorted(result.artifacts, key=lambda a: (str(Path(a.rel).parent), a.rel)):
        parent, name = str(Path(a.rel).parent), Path(a.rel).name
        if parent != folder:
            folder = parent
            lead = "  " if narrow else f"{'':{fixed}} "
            lines.append(f"{lead}[dim]{_esc(shorten(parent + '/', name_w))}[/dim]")
        st = status_of.get(a.rel)
        status = st.status if st else "-"
        who = whos[a.rel] if len(whos[a.rel]) <= who_w else whos[a.rel][:who_w - 1] + "…"
        row = (f"[{_STYLE.get(status, 'default')}]{status:7}[/] {_size(a.size):>9} "
               f"{formats.for_file_kind(a.kind).labels.get(str(a.kind), str(a.kind)):6} {_esc(who):{who_w}}")
        shown = _esc(shorten(name, name_w - 2 if parent != '.' else name_w))
        lines += [row.rstrip(), f"    {shown}"] if narrow else [f"{row}   {shown}"]
        why = ([st.reason] if st and st.reason and st.status != DONE else []) + notes.get(a.rel, [])
        for w in why:
            if w in shared:
                w = f"{w.split('; ')[0]} (what to do: below, once for all {shared[w]})"
            lines += [Text(" " * 8) + piece for piece in fit_lines(Text.assemble(("└ ", "dim"), w), width - 8, 2)]
    for w, n in shared.items():
        lines += fit_lines(Text.assemble((f"for all {n} above: ", "bold"), w), width, 2)
    return lines


#: A reason this long, shared by several rows, is said once below the rows (with the count).
_LONG_REASON = 100


def _shared_reasons(result: CollectResult) -> dict[str, int]:
    """Long reasons given for more than one row (nsys's install advice for every report)."""
    counts = Counter(s.reason for s in result.statuses if s.reason and s.status != DONE)
    return {r: n for r, n in counts.items() if n > 1 and len(r) > _LONG_REASON}


def say(console: Console, markup: str, indent: int = 0) -> None:
    """Print one logical line in the console's width, broken at words but never between a number
    and its unit or noun (`99.8 ms`, `3 failed`); a word wider than the line stays whole."""
    for piece in fit_lines(markup, console.width, indent):
        console.print(piece, highlight=False, crop=False, no_wrap=True, overflow="ignore")


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)


_TIMESTAMP = re.compile(r"_\d{14,17}(?=\.)")   # verl's torch trace names end in a 17-digit timestamp


def shorten(name: str, width: int) -> str:
    """A file name in `width` columns: verl's trailing timestamp dropped first, then the middle
    of the head, since names of one run differ at their end (step, rank, pid, extension)."""
    if len(name) <= width:
        return name
    name = _TIMESTAMP.sub("", name)
    if len(name) <= width:
        return name
    step_at = name.rfind("_step")
    if 0 < step_at and len(name) - step_at < width:      # keep the step, rank, pid and extension
        return "…" + name[-(width - 1):]
    head = min(7, max(1, width // 4))
    return name[:head] + "…" + name[-(width - head - 1):]


def closing_line(result: CollectResult, max_named: int = 10) -> str:
    """`9 artifacts: 1 summarized, 3 skipped, 5 failed: a.sqlite, b.json.gz; 2.8s` (rich markup).

    What a reader of a CI log needs: how much of the run is in the bundle, and which files are not
    (each failed file by its relative name; past `max_named`, a count per folder)."""
    done, reused = len(result.with_status(DONE)), len(result.with_status(REUSED))
    skipped, failed = len(result.with_status(SKIPPED)), result.with_status(FAILED)
    parts = [f"{done + reused} summarized" + (f" ({reused} reused)" if reused else ""), f"{skipped} skipped",
             f"[bold red]{len(failed)} failed[/bold red]" if failed else "0 failed"]
    line = f"{plural(len(result.artifacts), 'artifact')}: " + ", ".join(parts)
    if failed:
        line += ": " + _esc(", ".join(_short_rel(s.rel) for s in failed[:max_named]))
        rest = failed[max_named:]
        if rest:
            where = Counter(str(Path(s.rel).parent) for s in rest)
            line += _esc(f" and {len(rest)} more (" + ", ".join(f"{n} in {d}/" for d, n in where.most_common(3))
                         + "; manifest.json lists them all)")
    bad = unreadable(result.skipped)        # named like artifacts, content not readable: by name
    if bad:
        line += _esc(f"; {plural(len(bad), 'file')} unreadable: "
                     + ", ".join(f"{_short_rel(rel)} ({why})" for rel, why in bad[:max_named])
                     + (f" and {len(bad) - max_named} more (manifest.json lists them)" if len(bad) > max_named else ""))
    others = [(rel, why) for rel, why in result.skipped if (rel, why.removeprefix("unreadable: ")) not in bad]
    if others:
        reasons = Counter(why.split(" (")[0] for _, why in others)
        line += (f"; {plural(len(others), 'other file')} ignored ("
                 + ", ".join(f"{n} {r}" for r, n in reasons.most_common(3)) + ")")
    return line + f"; {result.seconds:.1f}s"


def node_line(nodes: list[Any]) -> str:
    """`ray: 4 nodes: 2 with artifacts, 1 with nothing, 1 dead` (and why, for a failed node)."""
    counts = Counter(n.status for n in nodes)
    words = {"ok": "with artifacts", "nothing": "with nothing", "failed": "failed", "dead": "dead"}
    line = f"ray: {plural(len(nodes), 'node')}: " + ", ".join(f"{counts[k]} {w}" for k, w in words.items() if counts[k])
    failed = [n for n in nodes if n.status == "failed" and n.detail]
    return line + (_esc(f" ({failed[0].node}: {failed[0].detail})") if failed else "")


def _short_rel(rel: str, width: int = 48) -> str:
    p = Path(rel)
    return rel if p.parent == Path(".") else f"{p.parent}/{shorten(p.name, max(20, width - len(str(p.parent))))}"


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)

"""`verlprof scrub` and `verlprof check`: make profiler artifacts shareable, and prove they are.

Why both here: they are two halves of one promise. `scrub` writes secret-free copies (and checks
them before it says so); `check` re-opens any files, a whole share bundle included, and exits 1
when anything secret or personal remains, printing where and what kind, never the value.

`scrub` follows collect's exit codes: 0 every input scrubbed; 3 some failed or were refused
(listed, the rest written; `--strict`: nothing kept); 4 none could be scrubbed; 1 the check found
something in the outputs (removed); 2 bad usage.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..workers import jobs_option

from .words import plural
from .wrap import fit_plain


def _policy(policy: Optional[Path], values_file: Optional[Path], local_env: Optional[bool],
            keep_names: Optional[Path] = None):
    from ...stages.scrub import load_policy, read_values_file
    from ...stages.scrub import read_keep_names

    extra = read_values_file(values_file) if values_file else None
    pol = load_policy(policy, extra_values=extra, use_local_environment=local_env)
    if keep_names is not None:   # the owner's approved user-written strings, published as they are
        from dataclasses import replace
        pol = replace(pol, approved_names=tuple(sorted(set(pol.approved_names) | set(read_keep_names(keep_names)))))
    return pol


KEEP_NAMES_HELP = ("User-written strings you approve (one a line; the review list, edited down, is such a file): "
                   "published as they are instead of as pseudonyms.")


def scrub_command(
    inputs: List[Path] = typer.Argument(..., help="nsys SQLite exports, chrome traces (.json/.json.gz), memory snapshots (.pickle), or folders of them."),
    out: Path = typer.Option(..., "-o", "--out", help="Output folder (or output file for a single input file)."),
    policy: Optional[Path] = typer.Option(None, "--policy", help="Policy file (TOML or YAML) overriding the defaults."),
    values_file: Optional[Path] = typer.Option(None, "--values-file", help="Extra known secret values, one per line."),
    local_env: Optional[bool] = typer.Option(None, "--local-env/--no-local-env", help="Also treat this machine's host/user names and secret-named environment values as secrets (default: policy, on)."),
    salt: Optional[str] = typer.Option(None, "--salt", help="Salt for GPU UUID hashes and fallback pseudonyms (default: derived from the inputs)."),
    jobs: int = jobs_option(1, "1"),
    work: Optional[Path] = typer.Option(None, "--work", help="Work folder for done records (default $VERLPROF_CACHE or ~/.cache/verlprof)."),
    verify: bool = typer.Option(True, "--verify/--no-verify", help="Run `check` on the outputs and refuse them when anything remains."),
    strict: bool = typer.Option(False, "--strict", help="Any failed or refused input fails the run: no output is kept (exit 3)."),
    keep_names: Optional[Path] = typer.Option(None, "--keep-names", help=KEEP_NAMES_HELP),
) -> None:
    """Write scrubbed copies of profiler artifacts: nothing secret or personal leaves (exit codes below)."""
    from ...stages.core.errors import plain_reason
    from ...stages.scrub import format_findings
    from ..stage_runs import scrub_inputs

    from ...stages.core.done_records import default_work_dir
    from ..output_places import OutputPlace, check_not_inputs, check_output_places
    from ...stages.scrub import closing_line

    one_file = len(inputs) == 1 and inputs[0].is_file() and not out.is_dir()
    places = (OutputPlace(out, "-o", inside=not one_file), OutputPlace(work or default_work_dir(), "--work"))
    check_not_inputs(inputs, *places)
    check_output_places(*places)
    pol = _policy(policy, values_file, local_env, keep_names)
    run = scrub_inputs(inputs, out, pol, jobs=jobs, work_dir=work, salt=salt, verify=verify)
    own = run.display          # the owner's terminal: their own file names, not the published ones
    for r in run.results:
        if r.status in ("done", "cached"):
            typer.echo(f"{r.status:7} {own.get(r.rel, r.rel)} -> {r.dst}: {r.total} replacements")
        else:
            typer.echo(f"{r.status:7} {own.get(r.rel, r.rel)}: {plain_reason(r.detail, path=own.get(r.rel, r.rel))}", err=True)
    for rel, why in run.skipped:
        if "verlprof's own output" not in why:   # those were said once, as they were found
            typer.echo(f"skipped {rel}: {why}")
    if run.report and scrub_exit_code(run) != 4:
        typer.echo(f"report  {run.report}")
    if run.findings:
        typer.echo("check found secrets or personal data in the outputs; they were removed:", err=True)
        for line in format_findings(run.findings):
            typer.echo(f"  {line}", err=True)
    code = scrub_exit_code(run)
    failed = [own.get(r.rel, r.rel) for r in run.results if r.status not in ("done", "cached")]
    scrubbed = len(run.results) - len(failed)
    # the closing count on stdout: each failure was named once above, on stderr, with its reason
    end = ""
    if code == 3 and strict:
        _remove_outputs(run)
        end = "; --strict: no output kept"
    elif code == 4:
        _remove_outputs(run)        # a report of nothing is no output: OUT is left as it was
        end = "; nothing could be scrubbed, no output kept"
    typer.echo(f"{plural(len(run.results), 'input')}: {scrubbed} scrubbed, {len(failed)} failed"
               + (f": {', '.join(failed)}" if failed else "") + end)
    if run.review_list is not None:
        for piece in fit_plain(closing_line(run.named, run.review_list)):   # one statement, fitted
            typer.echo(piece)
    raise typer.Exit(code)


def scrub_exit_code(run) -> int:
    """collect's rules for `scrub`: 1 check findings, 4 nothing scrubbed, 3 some failed, 0 all."""
    from ...stages.core.errors import ExitCode

    if run.findings:
        return int(ExitCode.REFUSED)
    ok = [r for r in run.results if r.status in ("done", "cached")]
    if not ok:
        return int(ExitCode.NOTHING) if run.results else int(ExitCode.OK)
    return int(ExitCode.PARTIAL) if len(ok) < len(run.results) else int(ExitCode.OK)


def _remove_outputs(run) -> None:
    """--strict: take back every output this run lists (scrubbed copies and the report)."""
    for r in run.results:
        if r.status in ("done", "cached") and r.dst:
            Path(r.dst).unlink(missing_ok=True)
    if run.report:
        report = Path(run.report)
        report.unlink(missing_ok=True)
        try:
            report.parent.rmdir()   # the OUT folder this run made, if nothing else is in it
        except OSError:
            pass


def check_command(
    paths: List[Path] = typer.Argument(..., help="Files or folders to verify (a share bundle, scrubbed outputs, ...)."),
    policy: Optional[Path] = typer.Option(None, "--policy", help="Policy file (TOML or YAML) overriding the defaults."),
    values_file: Optional[Path] = typer.Option(None, "--values-file", help="Known secret values to look for, one per line."),
    local_env: Optional[bool] = typer.Option(None, "--local-env/--no-local-env", help="Also look for this machine's host/user names and secret-named environment values."),
    keep_names: Optional[Path] = typer.Option(None, "--keep-names", help="User-written strings you approved (as for scrub and collect): not reported as user_text."),
) -> None:
    """Verify files hold nothing secret or personal; exit 1 (listing locations, never values) if they do."""
    from ...stages.scrub import Checker, Pseudonyms, class_totals, format_findings, local_identities

    pol = _policy(policy, values_file, local_env, keep_names)
    known = [local_identities(pol)] if pol.use_local_environment else []
    checker = Checker(pol, Pseudonyms.build(known, salt="", policy=pol))
    findings = checker.check_paths(paths)
    if findings:
        for line in format_findings(findings, limit=500) + class_totals(findings):
            typer.echo(line)
        typer.echo(f"verlprof check: {plural(len(findings), 'finding')} in {plural(checker.files, 'file')}", err=True)
        raise typer.Exit(1)
    typer.echo(f"verlprof check: no findings in {plural(checker.files, 'file')}")


_EPILOG = ("Exit codes: 0 every input scrubbed; 3 some inputs failed or were refused (listed; --strict: "
           "no output kept); 4 none could be scrubbed; 1 the check found secrets in the outputs (removed); "
           "2 bad usage.\n\n"
           "Example: verlprof scrub run/worker_process_1983.2.sqlite -o /tmp/scrubbed")
_CHECK_EPILOG = "Example: verlprof check /tmp/verlprof-sample /tmp/verlprof-sample.tar.gz"


def register(app: typer.Typer) -> None:
    """Add `scrub` and `check` to the verlprof CLI."""
    app.command("scrub", epilog=_EPILOG)(scrub_command)
    app.command("check", epilog=_CHECK_EPILOG)(check_command)


__all__ = ["register", "scrub_command", "check_command"]

"""``verlprof doctor``: check a profiling config before a run, or a run folder after it.

    verlprof doctor .hydra/config.yaml                       # a composed config
    verlprof doctor runs/2024-06-01/ -- trainer.save_freq=-1 # a run folder (+ what you'd change)
    verlprof doctor --config base.yaml -- +trainer.save_freq=-1 global_profiler.steps=[1,2]
    verlprof doctor -- python3 -m verl.trainer.main_ppo trainer.total_training_steps=1 ...
    verlprof doctor run_qwen3_8b.sh [-- extra overrides]       # a launch script, read not run

The checks live in ``verlprof.stages.doctor``; this module only reads the inputs, prints the
findings (a list in the terminal's width, each fix whole on its own line, or ``--json``) and sets
the exit status (1 when an error-level finding exists, 2 for bad input). ``print_findings`` is reusable by other commands (``collect``).
"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from typing import Optional

import typer
import yaml
from rich.console import Console
from rich.text import Text

from ...stages import doctor as D
from ...stages.core.errors import VerlprofError
from .words import plural

_SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def findings_to_json(findings: list[D.Finding], target: Optional[str] = None, inputs: Optional[dict] = None) -> dict:
    counts = {s: sum(1 for f in findings if f.severity == s) for s in ("error", "warning", "info")}
    return {"target": target, "inputs": inputs or {}, "counts": counts,
            "findings": [f.to_dict() for f in D.sort_findings(findings)]}


def print_findings(findings: list[D.Finding], console: Optional[Console] = None, title: Optional[str] = None) -> None:
    """Findings, most severe first, in the terminal's width: a heading line per finding, the message
    wrapped under it, and the fix on a line of its own, never wrapped (one copy, one paste).

    Why not a table: four columns at 80 columns wrapped the fixes in the middle of a key, so they
    could not be pasted; a fix longer than the terminal is left for the terminal to fold, whole.
    """
    console = console or Console()
    findings = D.sort_findings(findings)
    if not findings:
        console.print("[green]doctor: no findings[/green]" + (f" ({title})" if title else ""))
        return
    if title:
        console.print(Text(title, style="bold"), soft_wrap=True)
    for f in findings:
        console.print(Text.assemble((f"{f.severity:8}", _SEV_STYLE.get(f.severity, "")), " ", (f.code, "bold")))
        console.print(Text(textwrap.fill(f.message, width=max(40, console.width), initial_indent="  ",
                                         subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)),
                      soft_wrap=True)
        for line in fix_lines(f.fix, console.width - 4):
            console.print(Text("    " + line, style="green"), soft_wrap=True)
    n_err = sum(1 for f in findings if f.severity == "error")
    n_warn = sum(1 for f in findings if f.severity == "warning")
    console.print(f"{plural(n_err, 'error')}, {plural(n_warn, 'warning')}, "
                  f"{plural(len(findings) - n_err - n_warn, 'note')}")


def fix_lines(fix: str, width: int) -> list[str]:
    """A fix as printed: one line when it fits; a fix made only of override words that does not fit,
    one word a line (each whole, each pasteable); anything else one line, left whole."""
    if not fix:
        return []
    if len(fix) <= width:
        return [fix]
    out: list[str] = []
    # a mixed fix (`did you mean K? K=V  (or +K=V to add a new key)`, 150 characters for a deep
    # key): each sentence, each override and the parenthesis on a line of its own, each whole
    for part in (p.strip() for p in re.split(r"(?<=\?) |  +", fix)):
        words = part.split()
        if not part:
            continue
        if len(part) <= width:
            out.append(part)
        elif all(_looks_like_override(w) for w in words):
            out.extend(words)
        else:   # prose: wrapped at spaces, a key never broken (it is copied whole)
            out.extend(textwrap.wrap(part, width, break_long_words=False, break_on_hyphens=False))
    return out


def _fail(msg: str, code: int = 2) -> None:
    typer.echo(f"verlprof doctor: {msg}", err=True)
    raise typer.Exit(code)


def _read_config(path: str) -> object:
    try:
        return D.load_yaml(path)
    except OSError as e:
        _fail(f"cannot read {path}: {e.strerror or e}")
    except yaml.YAMLError as e:
        _fail(f"{path} is not valid YAML: {str(e).splitlines()[0]}")
    return None  # unreachable


def _looks_like_override(word: str) -> bool:
    return "=" in word or word.startswith(("+", "~", "-"))


def _is_shell_script(path: str) -> bool:
    """A launch script: ``*.sh``/``*.bash``, or a file whose first line is a sh/bash shebang."""
    if path.endswith((".sh", ".bash")):
        return True
    try:
        with open(path, "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and (b"sh" in first.split(b"/")[-1])


def _check_against_verl(words: list[str], entrypoint: Optional[str], config_name: Optional[str],
                        config_path: Optional[str], release: Optional[str], inputs: dict,
                        ) -> tuple[list[D.Finding], Optional[dict], Optional[str]]:
    """Hydra's errors for ``words`` on the entrypoint's verl config; the composed base when known."""
    lc = D.check_launch(words, entrypoint, config_name=config_name, config_path=config_path, release=release)
    comp = lc.composition
    if comp is not None:
        inputs["verl_config"] = {"via": comp.via, "release": comp.release, "config": comp.config_name,
                                 "from": comp.where if comp.via == "keytree" else "installed package"}
    return lc.findings, (comp.base if comp is not None else None), lc.entrypoint


def run_doctor(
    target: Optional[str],
    words: list[str],
    config: Optional[str] = None,
    entrypoint: Optional[str] = None,
    phases: tuple[str, ...] = (),
    nsys: Optional[str] = None,
    use_verl_defaults: bool = True,
    verl_release: Optional[str] = None,
) -> tuple[list[D.Finding], dict]:
    """Resolve the inputs the way the CLI does and run the checks. Raises typer.Exit on bad input."""
    run: Optional[D.RunFolder] = None
    base: Optional[dict] = None
    base_kind: D.BaseKind = "none"
    recorded: list[str] = []
    inputs: dict = {}

    script: Optional[D.LaunchLine] = None
    appended: list[str] = []    # a script's "$@": the words given after it
    if target is not None:
        if os.path.isfile(target) and _is_shell_script(target):
            try:
                script = D.read_launch_script(target, args=words)
            except VerlprofError as e:
                _fail(str(e))
            inputs["script"] = target
            inputs["launch_line"] = script.line
            appended = list(words)
        elif os.path.isdir(target):
            run = D.load_run_folder(target)
            inputs["run_folder"] = target
        elif os.path.isfile(target):
            if config is not None:
                _fail(f"give the config once: as TARGET ({target}) or as --config ({config})")
            config = target
        else:
            _fail(f"no such file or folder: {target}")
    if config is not None:
        data = _read_config(config)
        if isinstance(data, list):  # an override list, e.g. .hydra/overrides.yaml
            words = [str(w) for w in data] + list(words)
            inputs["override_file"] = config
        elif isinstance(data, dict):
            base, base_kind = data, "config"
            inputs["config"] = config
        else:
            _fail(f"{config} holds neither a config mapping nor an override list")

    if run is not None:
        if run.config is None and base is None:
            if not run.artifacts:
                _fail(f"{target} holds no .hydra/config.yaml and no profiler output")
        elif base is None:
            base, base_kind, recorded = run.config, "composed-run", run.overrides
            inputs["config"] = run.config_path
        entrypoint = entrypoint or run.entrypoint

    findings: list[D.Finding] = []
    check_existence = True
    cname = cpath = None
    if script is not None:
        words = [w.text for w in script.words]
        entrypoint = entrypoint or script.entrypoint
        findings.extend(D.unknown_findings({w.text: w.unknown for w in script.words if w.unknown}, script.why))
        if script.others:
            findings.append(D.Finding("script-more-launches", "info",
                                      f"{target} launches a trainer {script.others + 1} times; only the first "
                                      f"(line {script.line}) is checked", "", None))
        cname, cpath = script.config_name, script.config_path
    if base is None and words and use_verl_defaults:
        ep, cn, cp, over = D.split_launch_words(words)
        if script is not None:
            ep, cn, cp = entrypoint, cname, cpath
        found, composed, ep = _check_against_verl(over, entrypoint or ep, cn, cp, verl_release, inputs)
        findings.extend(found)
        entrypoint, words, check_existence = ep, over, False
        if composed is not None:
            base, base_kind = composed, "verl-default"

    if base is None and not words and run is None:
        _fail("nothing to check: give a config yaml, a run folder, a launch script, or overrides after --")

    supports = None
    if nsys != "none":
        supports = D.nsys_supports_discard_environment(nsys)
    if base is not None or words:
        cfg = D.build_profile_config(base, words, base_kind=base_kind, recorded_words=recorded,
                                     entrypoint=entrypoint, phases=phases, nsys_supports_discard_env=supports,
                                     check_existence=check_existence, appended_words=appended)
        checked = D.config_checks(cfg)
        if script is not None:  # a value the script leaves unknown is not judged as null
            checked = D.soften_unknown(checked, {w.text: w.unknown for w in script.words if w.unknown})
        findings.extend(checked)
        inputs["entrypoint"] = cfg.entrypoint
    if run is not None:
        findings.extend(D.after_run_checks(run.artifacts, run.config))
        inputs["artifacts"] = len(run.artifacts)
    return D.sort_findings(findings), inputs


def doctor(
    ctx: typer.Context,
    target: Optional[str] = typer.Argument(
        None, metavar="TARGET [OVERRIDES...]", help="A composed config yaml (.hydra/config.yaml), an override list yaml, "
        "a launch script (*.sh: read, never run), or a run folder. Anything after it (or after --) is read as "
        "Hydra override words (for a script: what its \"$@\" passes)."),
    config: Optional[str] = typer.Option(None, "--config", "-c", help="Composed config to apply the overrides to."),
    as_json: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
    entrypoint: Optional[str] = typer.Option(
        None, "--entrypoint", help="The module the run launches, e.g. verl_omni.trainer.main_diffusion."),
    phase: list[str] = typer.Option(
        [], "--phase", help="A phase you want profiled: actor, generation, ref, reward, critic (repeatable)."),
    nsys: Optional[str] = typer.Option(
        None, "--nsys", help="nsys binary to ask about --discard-environment ('none' to skip; default: PATH)."),
    no_verl_defaults: bool = typer.Option(
        False, "--no-verl-defaults", help="With overrides only, do not check them against verl's config."),
    verl_release: Optional[str] = typer.Option(
        None, "--verl-release", help="Check against the key tree shipped for this release (e.g. verl-0.8.0, "
        "verl-omni-v0.2.0) instead of composing the installed verl with Hydra."),
) -> None:
    """Check a profiling run before it starts (config / overrides) or after it ends (run folder).

    verlprof doctor [TARGET] [OVERRIDES...]; put overrides after -- (e.g. `-- +a.b=1 ~c`).
    Exit status 1 when an error-level finding exists, 2 for input it cannot read.
    """
    words = list(ctx.args)
    if target is not None and not os.path.exists(target):
        pathish = target.endswith((".yaml", ".yml")) or "/" in target or os.sep in target
        if _looks_like_override(target) or not pathish:
            # an override, or the first word of a launch line (`-- python3 -m ...`)
            words.insert(0, target)
            target = None
    findings, inputs = run_doctor(target, words, config=config, entrypoint=entrypoint, phases=tuple(phase),
                                  nsys=nsys, use_verl_defaults=not no_verl_defaults, verl_release=verl_release)
    if as_json:
        typer.echo(json.dumps(findings_to_json(findings, target, inputs), indent=2))
    else:
        print_findings(findings, Console(), title=f"verlprof doctor {target or ''}".strip())
    if D.has_errors(findings):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the ``doctor`` command to the verlprof CLI."""
    app.command(
        "doctor",
        epilog="Example: verlprof doctor run_qwen3_8b_fsdp.sh -- global_profiler.tool=nsys",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(doctor)


if __name__ == "__main__":  # pragma: no cover
    _app = typer.Typer()
    register(_app)
    _app(sys.argv[1:])

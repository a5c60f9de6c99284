"""The bundle's tables (summaries/*.parquet and ranks.parquet), each written and checked as a job.

Why a module of its own: collect's driver is the serial part of a run (issue 30: 16 reports on 16
cores must scale 12.8x). Writing the tables, computing ranks.parquet across every rank and
checking the written files took most of the driver's time after pass 2, one after the other. Here
they are two jobs: summaries/ on the run's pool, ranks.parquet in the driver meanwhile; each job
checks what it wrote and returns the bytes' sha256 with the findings, so the run-level check
(pipeline/collect_publish.verify) reads only the JSON the driver wrote, and re-reads a table only
if its bytes changed since its check.

ranks.parquet needs pandas (pipeline/ranks.py); importing `verlprof.pipeline.collect` does not
import it (a CLI start-up that does not need it), and the 0.3-0.5 s of the import never sit on the
run's critical path: the driver runs `prepare_tables` on a thread while pass 2's jobs run on the
pool (`executors.run_jobs(..., meanwhile=)`), and then makes ranks.parquet itself while a worker
writes the other tables. (Two earlier ways cost serial time: the import on a thread while gather
hashed held the GIL the hashing threads needed; a ranks job on a worker found pandas imported only
when a worker had idled long enough before pass 2's last job ended, which on 16 busy cores it had
not.) The HTML report's pages need pandas too (`write_run_report`, `collect --html` only).

The summaries job imports no pandas: its tables are built from buffers
(stages/summarize/arrow_columns.py), since pyarrow's converter imports pandas in any process that
converts Python values, which tripled the job on a worker (0.58 s instead of 0.17 s).

ranks.parquet is made in a folder of its own beside summaries/ (`write_summaries` writes an empty
one of every schema) and moved in once both jobs are done (`move_ranks_in`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..stages import scrub as scrub_stage
from ..stages import summarize as summarize_stage
from ..stages.core import atomic
from ..stages.core.hashing import sha256_file
from .collect_tasks import check_written

#: Where the ranks job writes ranks.parquet (in staging, beside summaries/), until `move_ranks_in`.
RANKS_DIR = ".ranks"
RANKS = "summaries/ranks.parquet"


@dataclass(frozen=True)
class TablesWork:
    """What one table job writes: `rows` (summaries: the scrubbed rows by schema; ranks: `phases`
    and the other profiled steps' `step_phases`) into the staging folder `staging`."""

    staging: str
    rows: dict[str, Any]
    metadata: dict[str, str] | None = None
    noise_floor: str | None = None   # ranks: collect's --noise-floor (None: the default)


@dataclass
class Written:
    """What a table job wrote and checked: bundle name -> sha256 of the bytes checked, and what the
    check found (paths are bundle names, as pass 2's window checks report them)."""

    checked: dict[str, str] = field(default_factory=dict)
    findings: list[Any] = field(default_factory=list)
    culprits: list[dict[str, Any]] = field(default_factory=list)   # ranks: the chosen step's culprit rows


def write_summaries_checked(item: TablesWork, scrub: scrub_stage.ScrubOptions) -> Written:
    """summaries/<schema>.parquet of every schema but ranks (written by `write_ranks_checked`), checked."""
    written = summarize_stage.write_summaries(item.rows, Path(item.staging) / "summaries", item.metadata)
    return _checked({f"summaries/{p.name}": p for name, p in written.items() if name != "ranks"}, scrub)


def write_ranks_checked(item: TablesWork, scrub: scrub_stage.ScrubOptions) -> Written:
    """ranks.parquet of the run across ranks (every profiled step), checked; in RANKS_DIR."""
    import pyarrow.compute as pc

    from . import ranks   # pandas: only where ranks.parquet is made (see the module docstring)

    floor = ranks.parse_noise_floor(item.noise_floor) if item.noise_floor else ranks.DEFAULT_FLOOR
    folder = Path(item.staging) / RANKS_DIR
    folder.mkdir(exist_ok=True)
    table = ranks.write_ranks(item.rows.get("phases") or [], folder, item.metadata,
                              other_steps=item.rows.get("step_phases") or [], floor=floor)
    written = _checked({RANKS: folder / "ranks.parquet"}, scrub)
    written.culprits = table.filter(pc.and_(pc.equal(table["row_kind"], "culprit"),
                                            pc.equal(table["chosen"], True))).to_pylist()
    return written


def move_ranks_in(staging: Path) -> None:
    """ranks.parquet into summaries/ (over the empty one `write_summaries` wrote); same bytes, so
    its check still holds."""
    folder = Path(staging) / RANKS_DIR
    os.replace(folder / "ranks.parquet", Path(staging) / RANKS)
    folder.rmdir()


def write_run_report(staging: Path, rows: dict[str, Any], manifest: dict[str, Any]) -> None:
    """report.html (`collect --html`) into staging; the report pages need pandas, imported here
    for the same reason as ranks.py."""
    from .report import render_run_report

    atomic.write_text(Path(staging) / "report.html", render_run_report(rows.get("phases", []), rows.get("kernels", []),
                                                                       manifest, bundle=staging))


def prepare_tables() -> None:
    """Import what the table jobs need (pandas and pipeline/ranks.py, pyarrow.parquet), so that
    making them does not wait for it (module docstring). An import that fails here fails again,
    with its message, in the job that needs it."""
    try:
        import pyarrow.parquet  # noqa: F401 - the import is the point (every table job writes Parquet)

        from . import ranks  # noqa: F401
    except Exception:  # noqa: BLE001 - reported by the job that needs it
        pass


def _checked(files: dict[str, Path], scrub: scrub_stage.ScrubOptions) -> Written:
    findings = check_written(files, scrub)
    return Written({name: sha256_file(p) for name, p in files.items()}, findings)

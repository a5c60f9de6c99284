"""Summarize many runs side by side: `verlprof summarize BUNDLE_OR_RUN... -o OUT`.

Why: users profile many runs (configs, commits, model sizes) and need one table that says which
stage got slower where. Each input is a collect bundle (or a raw run folder that is collected
first); its per-run work (`summarize_run`) is a plain picklable function, so the executor decides
where it runs: inline, a local process pool, or Ray tasks. Per-run results travel back as Arrow IPC
bytes (not paths), so a task may run on another node of a cluster.

Resume: every finished per-run result is cached in the work dir under the bundle's content hash
and recorded with `DoneRecords`; a re-run reuses it without dispatching any work. All outputs are
written atomically; the stacked tables are streamed run by run, so memory does not grow with the
number of runs. A missing or corrupt input is reported (one line) and skipped, never fatal.

Outputs under OUT (see docs/batch.md): runs.parquet, phases.parquet, kernels.parquet, ranks.parquet
(stacked, with a `run` column), compare.parquet (per stage, role and metric: value in each run and delta against
the baseline), kernel_compare.parquet (largest kernel-time changes), report.html (optional).
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from ..stages.core import atomic
from ..stages.core.done_records import DoneRecords, default_work_dir
from ..stages.core.errors import BadInputError, ExitCode, VerlprofError
from ..stages.schema import arrow_schema
from . import compare, ranks, signals
from .bundle_read import (bundle_hash, conform, failed_artifacts, is_bundle, read_manifest, read_summary_table,
                          run_metadata)
from .executors import Executor, InlineExecutor, TaskResult, run_all
from .progress import NoProgress

#: Bump when the cached per-run payload changes shape: old done records are then ignored.
CACHE_VERSION = 5       # 2: meta carries the bundle's failed artifacts; 3: union totals, ranks table; 4: culprits (issue 32); 5: launch spans
STAGE = "summarize-run"

SUMMARY_TABLES = ("phases", "kernels")

RUNS_SCHEMA = pa.schema([
    ("run", pa.string()), ("input", pa.string()), ("bundle_hash", pa.string()),
    ("verlprof_version", pa.string()), ("verl_version", pa.string()), ("model", pa.string()),
    ("world_size", pa.int32()), ("roles", pa.list_(pa.string())), ("profiled_steps", pa.list_(pa.int32())),
    ("tool", pa.string()), ("date", pa.string()), ("config_hash", pa.string()), ("window_step", pa.int32()),
    ("artifacts", pa.int32()), ("phase_rows", pa.int64()), ("kernel_rows", pa.int64()),
    ("failed_artifacts", pa.int32()),
], metadata={"verlprof.schema": "runs"})


# ----------------------------------------------------------------------------------------------
# Records passed between the driver and the per-run work
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunInput:
    """One input of the batch. `kind` is "bundle" or "raw" (a run folder to collect first)."""

    index: int
    path: str
    run: str
    kind: str
    bundle_hash: str | None = None


@dataclass(frozen=True)
class BatchOptions:
    """Options of the per-run work (picklable; part of the cache key except `work_dir`)."""

    work_dir: str
    collect_options: dict[str, Any] | None = None

    def cache_key_options(self) -> dict[str, Any]:
        return {"v": CACHE_VERSION, "collect": self.collect_options}


@dataclass
class RunPayload:
    """What one run's work sends back: metadata and its tables as Arrow IPC bytes (node-neutral)."""

    bundle_hash: str
    meta: dict[str, Any]
    tables: dict[str, bytes]   # phases, kernels, stage_totals, kernel_totals


@dataclass
class RunStatus:
    """One line of the final table: a run that was summarized, reused from cache, or skipped.

    `failed` lists the artifacts its bundle's manifest records as failed ("rel: reason"): such a
    run is summarized from what it has, and shown (and counted in the exit code) as incomplete."""

    run: str
    input: str
    status: str          # done | cached | skipped
    detail: str = ""
    failed: tuple[str, ...] = ()

    @property
    def incomplete(self) -> bool:
        return self.status != "skipped" and bool(self.failed)


@dataclass
class BatchResult:
    runs: list[RunStatus]
    baseline: str | None
    outputs: dict[str, Path] = field(default_factory=dict)
    compare: pd.DataFrame | None = None
    kernel_changes: pd.DataFrame | None = None
    meta: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> list[RunStatus]:
        return [r for r in self.runs if r.status != "skipped"]

    @property
    def skipped(self) -> list[RunStatus]:
        return [r for r in self.runs if r.status == "skipped"]

    @property
    def incomplete(self) -> list[RunStatus]:
        return [r for r in self.runs if r.incomplete]

    @property
    def exit_code(self) -> int:
        """collect's rules over runs: 0 all summarized and complete; 3 some skipped or incomplete;
        4 none summarized."""
        if not self.ok:
            return int(ExitCode.NOTHING)
        return int(ExitCode.PARTIAL) if self.skipped or self.incomplete else int(ExitCode.OK)


def _ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def _from_ipc(data: bytes) -> pa.Table:
    return ipc.open_stream(pa.py_buffer(data)).read_all()


def _frame_table(df: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(df, preserve_index=False)


def _collect_raw(path: Path, options: BatchOptions) -> Path:
    """Collect a raw run folder into a bundle in the work dir (`pipeline.collect.run_collect`).

    Runs inline inside this task (no nested pool); collect's own done records make a re-run cheap.
    """
    from . import collect as collect_mod

    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    work = Path(options.work_dir)
    out = work / "summarize" / "collected" / key
    allowed = {f.name for f in dataclasses.fields(collect_mod.CollectOptions)}
    extra = {k: v for k, v in (options.collect_options or {}).items() if k in allowed}
    extra.update(sources=[path], out=out, work_dir=work, jobs=1, ray=None, html=False, pack=False)
    result = collect_mod.run_collect(collect_mod.CollectOptions(**extra), NoProgress(), InlineExecutor())
    bundle = Path(result.out)
    if not is_bundle(bundle):
        raise VerlprofError(path, "collect produced no bundle")
    return bundle


def summarize_run(item: RunInput, options: BatchOptions) -> RunPayload:
    """Per-run work: read and check one bundle, compute its stage and kernel totals.

    Plain and picklable: runs inline, in a process pool or as a Ray task. It reads only.
    """
    path = Path(item.path)
    if not path.exists():
        raise BadInputError(path, "does not exist")
    if item.kind == "raw":
        bundle = _collect_raw(path, options)
        try:
            return _summarize_bundle(bundle)
        except VerlprofError as exc:   # name the user's input, not the work-dir bundle
            raise type(exc)(path, f"collected, but {exc.what}") from None
    if not path.is_dir():
        raise BadInputError(path, "not a folder (expected a verlprof bundle or a run folder)")
    return _summarize_bundle(path)


def _summarize_bundle(path: Path) -> RunPayload:
    digest = bundle_hash(path)
    manifest = read_manifest(path)
    tables = {name: read_summary_table(path, name) for name in SUMMARY_TABLES}
    if tables["phases"].num_rows == 0:
        raise BadInputError(path / "summaries" / "phases.parquet", "has no phase rows: nothing to compare")
    totals = compare.stage_totals(tables["phases"])
    steps_path = path / "summaries" / "steps.parquet"
    if steps_path.is_file():
        try:
            totals = compare.with_step_noise(totals, pq.read_table(steps_path).to_pandas())
        except (pa.ArrowException, OSError, KeyError, ValueError):
            pass   # noise is a refinement: without a readable steps table the fixed threshold applies
    ktotals = compare.kernel_totals(tables["kernels"])
    return RunPayload(
        bundle_hash=digest,
        meta=run_metadata(manifest, tables["phases"], tables["kernels"]),
        tables={
            "phases": _ipc(tables["phases"]), "kernels": _ipc(tables["kernels"]),
            "stage_totals": _ipc(_frame_table(totals)), "kernel_totals": _ipc(_frame_table(ktotals)),
            "ranks": _ipc(ranks.bundle_ranks_table(path, tables["phases"])),
        },
    )


# ----------------------------------------------------------------------------------------------
# The per-run cache in the work dir
# ----------------------------------------------------------------------------------------------


class RunCache:
    """Finished per-run payloads under `<work>/summarize/<hash>/`, guarded by done records."""

    def __init__(self, work_dir: Path, options: BatchOptions) -> None:
        self.root = work_dir / "summarize"
        self.done = DoneRecords(work_dir, STAGE)
        self.key_options = options.cache_key_options()

    def folder(self, digest: str) -> Path:
        return self.root / digest

    def load(self, digest: str) -> RunPayload | None:
        rec = self.done.lookup(digest, self.key_options)
        if rec is None:
            return None
        try:
            meta = json.loads(Path(rec["outputs"]["meta"]).read_text())
            tables = {k: Path(v).read_bytes() for k, v in rec["outputs"].items() if k != "meta"}
        except (OSError, ValueError, KeyError):
            return None
        return RunPayload(digest, meta, tables)

    def store(self, payload: RunPayload) -> None:
        folder = self.folder(payload.bundle_hash)
        outputs: dict[str, str] = {}
        for name, data in payload.tables.items():
            atomic.write_bytes(folder / f"{name}.arrow", data)
            outputs[name] = str(folder / f"{name}.arrow")
        atomic.write_json(folder / "meta.json", payload.meta)
        outputs["meta"] = str(folder / "meta.json")
        self.done.record(payload.bundle_hash, self.key_options, outputs)  # last: marks it complete


# ----------------------------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------------------------


def run_ids(inputs: Sequence[str]) -> list[str]:
    """Readable, unique run ids from input paths: the folder name, more of the path when needed."""
    parts = [[p for p in Path(s).as_posix().rstrip("/").split("/") if p not in ("", ".")] or [s] for s in inputs]
    ids = [p[-1] for p in parts]
    for depth in (2, 3):
        dup = {i for i in ids if ids.count(i) > 1}
        if not dup:
            break
        ids = ["/".join(p[-depth:]) if i in dup else i for i, p in zip(ids, parts)]
    seen: dict[str, int] = {}
    out = []
    for i in ids:
        seen[i] = seen.get(i, 0) + 1
        out.append(i if seen[i] == 1 else f"{i}-{seen[i]}")
    return out


def classify_input(index: int, path: str, run: str) -> tuple[RunInput | None, str | None]:
    """A RunInput for the work, or the one-line reason to skip it."""
    p = Path(path)
    if not p.exists():
        return None, f"{path}: does not exist"
    if p.is_dir() and is_bundle(p):
        try:
            return RunInput(index, str(p), run, "bundle", bundle_hash(p)), None
        except VerlprofError as exc:
            return None, str(exc)
    if p.is_dir():
        if (p / "summaries").is_dir():
            return None, f"{path}: not a verlprof bundle: summaries/ but no manifest.json"
        return RunInput(index, str(p), run, "raw"), None
    return None, f"{path}: not a folder (expected a verlprof bundle or a run folder)"


def pick_baseline(baseline: str | None, ok_runs: list[RunStatus]) -> str:
    """`--baseline` as a run id, an input as given, or a 1-based position; default the first run."""
    if not ok_runs:
        raise VerlprofError(None, "no run could be summarized")
    if baseline is None:
        return ok_runs[0].run
    for r in ok_runs:
        if baseline in (r.run, r.input) or Path(baseline).as_posix().rstrip("/") == Path(r.input).as_posix().rstrip("/"):
            return r.run
    if baseline.isdigit() and 1 <= int(baseline) <= len(ok_runs):
        return ok_runs[int(baseline) - 1].run
    raise VerlprofError(None, f"--baseline {baseline!r} is not among the summarized runs "
                              f"({', '.join(r.run for r in ok_runs)})")


def _stack(out_path: Path, name: str, runs: list[tuple[str, RunPayload]]) -> int:
    """Stream every run's table into one Parquet file with a leading `run` column (atomic)."""
    schema = arrow_schema(name).insert(0, pa.field("run", pa.string()))
    schema = schema.with_metadata({**(arrow_schema(name).metadata or {}), b"verlprof.stacked": b"run"})
    rows = 0
    with atomic.atomic_path(out_path) as tmp:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as w:
            for run, payload in runs:
                t = _from_ipc(payload.tables[name])
                t = t.add_column(0, "run", pa.array([run] * t.num_rows, pa.string())).cast(schema)
                w.write_table(t)
                rows += t.num_rows
    return rows


def _write_table(path: Path, df: pd.DataFrame, schema: pa.Schema) -> None:
    table = pa.Table.from_pandas(df, schema=schema, preserve_index=False) if len(df) else schema.empty_table()
    with atomic.atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def summarize_runs(inputs: Sequence[str | Path], out: str | Path, *, baseline: str | None = None,
                   executor: Executor | None = None, work_dir: str | Path | None = None,
                   html: bool = False, top_kernels: int = 20, collect_options: dict[str, Any] | None = None,
                   on_done: Callable[[RunStatus], None] | None = None, strict: bool = False,
                   noise_rel: float = compare.NOISE_REL, noise_abs_ns: int = compare.NOISE_ABS_NS) -> BatchResult:
    """Summarize every input, stack their tables, compare against the baseline; write OUT.

    With `strict`, a skipped or incomplete run means no output is written (the result still says
    what happened to every run)."""
    out = Path(out)
    work = Path(work_dir) if work_dir is not None else default_work_dir()
    options = BatchOptions(work_dir=str(work), collect_options=collect_options)
    cache = RunCache(work, options)
    names = [str(p) for p in inputs]
    ids = run_ids(names)
    statuses: dict[int, RunStatus] = {}
    payloads: dict[int, RunPayload] = {}
    todo: list[RunInput] = []

    def finish(i: int, st: RunStatus) -> None:
        if st.status == "skipped":
            # One line that names the input, whatever the underlying reader said (pyarrow messages
            # may quote corrupt bytes, newlines included, and omit the file).
            detail = " ".join(st.detail.split())
            if st.input not in detail:
                detail = f"{st.input}: {detail}"
            st = RunStatus(st.run, st.input, st.status, detail)
        statuses[i] = st
        if on_done:
            on_done(st)

    for i, (name, rid) in enumerate(zip(names, ids)):
        item, why = classify_input(i, name, rid)
        if item is None:
            finish(i, RunStatus(rid, name, "skipped", why or "unusable"))
            continue
        cached = cache.load(item.bundle_hash) if item.bundle_hash else None
        if cached is not None:
            payloads[i] = cached
            finish(i, RunStatus(rid, name, "cached", failed=_failed_of(cached)))
        else:
            todo.append(item)

    def done(res: TaskResult) -> None:
        item = todo[res.index]
        if res.error is not None:
            finish(item.index, RunStatus(item.run, names[item.index], "skipped", res.error))
            return
        payload: RunPayload = res.value
        cache.store(payload)
        payloads[item.index] = payload
        finish(item.index, RunStatus(item.run, names[item.index], "done", failed=_failed_of(payload)))

    if todo:   # one executor for the batch; a signal kills its workers (pipeline/signals.py)
        ex = executor or InlineExecutor()
        with signals.interruptible(), ex:
            run_all(ex, summarize_run, todo, options, on_done=done)

    runs = [statuses[i] for i in range(len(names))]
    result = BatchResult(runs=runs, baseline=None)
    ok = [r for r in runs if r.status != "skipped"]
    if not ok or (strict and result.exit_code != ExitCode.OK):
        return result
    result.baseline = pick_baseline(baseline, ok)
    ordered = [(statuses[i].run, payloads[i]) for i in range(len(names)) if i in payloads]

    meta_rows = []
    for i in range(len(names)):
        if i in payloads:
            meta_rows.append({"run": statuses[i].run, "input": Path(names[i]).name,
                              "bundle_hash": payloads[i].bundle_hash,
                              **{k: v for k, v in payloads[i].meta.items() if k != "failed"}})
    result.meta = meta_rows
    out.mkdir(parents=True, exist_ok=True)
    _write_table(out / "runs.parquet", pd.DataFrame(meta_rows, columns=RUNS_SCHEMA.names), RUNS_SCHEMA)
    for name in (*SUMMARY_TABLES, "ranks"):
        _stack(out / f"{name}.parquet", name, ordered)
    totals = {run: _from_ipc(p.tables["stage_totals"]).to_pandas() for run, p in ordered}
    ktotals = {run: _from_ipc(p.tables["kernel_totals"]).to_pandas() for run, p in ordered}
    result.compare = compare.compare_stages(totals, result.baseline, noise_rel=noise_rel, noise_abs_ns=noise_abs_ns)
    result.kernel_changes = compare.kernel_changes(ktotals, result.baseline, top=top_kernels)
    _write_table(out / "compare.parquet", result.compare, compare.COMPARE_SCHEMA)
    _write_table(out / "kernel_compare.parquet", result.kernel_changes, compare.KERNEL_COMPARE_SCHEMA)
    result.outputs = {n: out / f"{n}.parquet" for n in ("runs", "phases", "kernels", "ranks", "compare", "kernel_compare")}
    if html:
        from .report_html import render_compare_report

        page = render_compare_report(result.compare, result.kernel_changes, meta_rows, baseline=result.baseline,
                                     culprit_rows=ranks.culprit_statements(
                                         {run: _from_ipc(p.tables["ranks"]) for run, p in ordered}))
        atomic.write_text(out / "report.html", page)
        result.outputs["html"] = out / "report.html"
    return result


def _failed_of(payload: RunPayload) -> tuple[str, ...]:
    failed = payload.meta.get("failed") if isinstance(payload.meta, dict) else None
    return tuple(str(f) for f in failed) if isinstance(failed, list) else ()


def clear_cache(work_dir: str | Path) -> None:
    """Forget every cached per-run result (for `--fresh`)."""
    work = Path(work_dir)
    for p in (work / "summarize", work / "done" / STAGE):
        if p.exists():
            shutil.rmtree(p, ignore_errors=True)


__all__ = [
    "BatchOptions", "BatchResult", "RunInput", "RunPayload", "RunStatus", "bundle_hash", "classify_input",
    "clear_cache", "failed_artifacts", "conform", "pick_baseline", "read_manifest", "read_summary_table", "run_ids",
    "run_metadata", "summarize_run", "summarize_runs",
]

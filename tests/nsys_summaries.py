"""Whole-export nsys summaries the tests compare with NVIDIA's own reports (nothing in verlprof
calls these: collect summarizes one step through `summarize/nsys.scan_nsys`).

- `summarize_nsys`: window + summarize one export on its own (phases, kernels and steps rows);
- `kernel_summary`: per kernel name over the whole export, as `nsys stats -r gpukernsum`
  (`by="demangled"`) or `nsys recipe cuda_gpu_kern_sum` (`by="short"`);
- `project_ranges`: NVIDIA's NVTX projection of every range, as `nsys stats -r nvtxgpuproj`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from verlprof.stages.readers.nsys_sqlite import NsysExport
from verlprof.stages.readers.nvtx_tree import RangeIndex
from verlprof.stages.summarize.nsys import projection_rows, scan_nsys, totals_rows
from verlprof.stages.summarize.projection import project
from verlprof.stages.summarize.types import SummarizeOptions, SummaryRows
from verlprof.stages.window import SourceIdentity, identity_from_path


def summarize_nsys(path: str | Path, ident: SourceIdentity | None = None,
                   options: SummarizeOptions | None = None) -> SummaryRows:
    """Window + summarize one export on its own (phases, kernels and steps rows)."""
    return scan_nsys(path, ident or identity_from_path(path), options or SummarizeOptions()).rows


def kernel_summary(path: str | Path, by: str = "demangled") -> list[dict[str, Any]]:
    """Per kernel name over the whole export (gpukernsum / cuda_gpu_kern_sum)."""
    col = {"demangled": "demangledName", "short": "shortName"}[by]
    with NsysExport.open(path) as db:
        index = RangeIndex.build(db.nvtx_ranges())
        return totals_rows(db, project(db, index, kernel_totals=True, kernel_name=col))


def project_ranges(path: str | Path) -> list[dict[str, Any]]:
    """NVIDIA's NVTX projection of every range of an export (nvtxgpuproj's rows)."""
    with NsysExport.open(path) as db:
        r = db.nvtx_ranges()
        return projection_rows(r, project(db, RangeIndex.build(r), kernel_totals=False))

"""export: `.nsys-rep` / `.qdstrm` to SQLite with the real `nsys export`, cached by content hash."""
from .nsys_export import (
    needs_tool,
    NSYS_KINDS,
    ExportOptions,
    ExportResult,
    check_work_outside_out,
    export_one,
    failed_export,
    prepare_export,
)
from .nsys_tool import find_nsys

__all__ = [
    "needs_tool",
    "NSYS_KINDS", "ExportOptions", "ExportResult", "check_work_outside_out", "export_one",
    "failed_export", "find_nsys", "prepare_export",
]

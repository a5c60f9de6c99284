"""scrub: remove secrets and personal data from SQLite exports, chrome traces and memory snapshots,
and `check` (re-scan) anything before it is shared."""
from .check import Checker, check_paths, class_totals, format_findings
from .identities import local_identities, Pseudonyms
from .policy import load_policy, Policy, read_values_file
from .provenance import closing_line, merge_named, read_keep_names, read_review_map, reveal, write_review
from .scrubber import Scrubber
from .tasks import (
    SCRUBBABLE,
    ScrubOptions,
    ScrubResult,
    ScrubRun,
    ScrubTask,
    build_options,
    bundle_salt,
    config_task,
    finish_scrub,
    identities_task,
    output_name,
    plan_inputs,
    scrub_task,
    write_report,
)
from .values import (
    publish_manifest,
    publish_name,
    publish_namer,
    publish_root,
    publish_scrubber,
    scrub_summary_rows,
    scrub_values,
    values_report,
)

__all__ = [
    "publish_manifest", "publish_name", "publish_namer", "publish_root", "publish_scrubber", "scrub_summary_rows", "scrub_values", "values_report",
    "Checker", "check_paths", "class_totals", "format_findings", "Policy", "Pseudonyms", "Scrubber", "load_policy",
    "local_identities", "read_values_file", "SCRUBBABLE", "ScrubOptions", "ScrubResult", "ScrubRun",
    "ScrubTask", "build_options", "bundle_salt", "config_task", "finish_scrub", "identities_task", "output_name",
    "plan_inputs", "scrub_task", "write_report", "write_review",
    "closing_line", "merge_named", "read_keep_names", "read_review_map", "reveal",
]

# The per-format scrubbers and identity scans, called by the format folders (stages/formats/<kind>/).
from .identities import find_config_identities
from .snapshot import find_snapshot_identities, scrub_snapshot
from .sqlite import scrub_sqlite
from .sqlite_cells import find_sqlite_identities
from .trace import find_trace_identities, scrub_trace

__all__ += [
    "find_config_identities", "find_snapshot_identities", "scrub_snapshot", "scrub_sqlite",
    "find_sqlite_identities", "find_trace_identities", "scrub_trace",
]

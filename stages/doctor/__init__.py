"""doctor: the traps that make a verl profiling run fail silently, found before and after the run.

One module per group of checks: `pins`, `phase_owners`, `overrides`, `nsys_capture` (before a run,
over a `ProfileConfig`), `after_run` (over the artifacts a run folder holds). The command is
`verlprof.pipeline.commands.doctor_cmd`.
"""
from .after_run import RunFolder, after_run_checks, load_run_folder, scan_run_folder
from .checks import CONFIG_CHECKS, config_checks
from .config import (
    BaseKind,
    ProfileConfig,
    build_profile_config,
    enabled_roles,
    load_verl_reference,
    load_yaml,
    nsys_supports_discard_environment,
    verl_reference_path,
)
from .findings import Finding, has_errors, sort_findings
from .nsys_capture import (
    check_capture_range_end,
    check_discard_environment,
    check_nsys_entrypoint,
    check_startup_step,
)
from .override_syntax import parse_overrides
from .overrides import check_overrides
from .phase_owners import check_phase_owners
from .pins import check_pins

__all__ = [
    "RunFolder", "after_run_checks", "load_run_folder", "scan_run_folder", "CONFIG_CHECKS",
    "config_checks", "BaseKind", "ProfileConfig", "build_profile_config", "enabled_roles",
    "load_verl_reference", "load_yaml", "nsys_supports_discard_environment", "verl_reference_path",
    "Finding", "has_errors", "sort_findings", "check_capture_range_end", "check_discard_environment",
    "check_nsys_entrypoint", "check_startup_step", "parse_overrides", "check_overrides",
    "check_phase_owners", "check_pins",
]

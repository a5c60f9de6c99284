"""doctor: the traps that make a verl profiling run fail silently, found before and after the run.

One module per group of checks: `pins`, `phase_owners`, `overrides`, `nsys_capture` (before a run,
over a `ProfileConfig`), `after_run` (over the artifacts a run folder holds). A launch's overrides
are checked against verl's own config by `launch_check` (Hydra compose in `hydra_compose`, or the
key trees shipped for verl releases in `keytrees`); `launch_script` reads them out of a bash
launch script. The command is `verlprof.pipeline.commands.doctor_cmd`.
"""
from .after_run import RunFolder, after_run_checks, load_run_folder, scan_run_folder
from .checks import CONFIG_CHECKS, config_checks
from .composition import Composition, OverrideProblem, did_you_mean
from .config import (
    BaseKind,
    ProfileConfig,
    build_profile_config,
    enabled_roles,
    load_yaml,
    nsys_supports_discard_environment,
    verl_reference_path,
)
from .entrypoints import DEFAULT_ENTRYPOINT, entry_config
from .findings import Finding, has_errors, sort_findings
from .hydra_compose import compose_overrides, hydra_version
from .keytrees import apply_to_tree, config_for, load_keytree, release_for, shipped_releases
from .launch_check import LaunchCheck, check_launch, installed_version, soften_unknown, unknown_findings
from .launch_script import LaunchLine, read_launch_script, read_launch_text, split_launch_words
from .nsys_capture import (
    check_capture_range_end,
    check_discard_environment,
    check_nsys_entrypoint,
    check_startup_step,
)
from .override_syntax import parse_overrides
from .overrides import check_overrides, composition_findings
from .phase_owners import check_phase_owners
from .pins import check_pins
from .profiler_keys import check_profiler_keys

__all__ = [
    "RunFolder", "after_run_checks", "load_run_folder", "scan_run_folder", "CONFIG_CHECKS",
    "config_checks", "BaseKind", "ProfileConfig", "build_profile_config", "enabled_roles",
    "load_yaml", "nsys_supports_discard_environment", "verl_reference_path",
    "Finding", "has_errors", "sort_findings", "check_capture_range_end", "check_discard_environment",
    "check_nsys_entrypoint", "check_startup_step", "parse_overrides", "check_overrides",
    "check_phase_owners", "check_pins", "Composition", "OverrideProblem", "did_you_mean",
    "DEFAULT_ENTRYPOINT", "entry_config", "compose_overrides", "hydra_version", "apply_to_tree", "config_for",
    "load_keytree", "release_for", "shipped_releases", "LaunchCheck", "check_launch", "installed_version",
    "unknown_findings", "soften_unknown", "LaunchLine", "read_launch_script", "read_launch_text", "split_launch_words",
    "composition_findings", "check_profiler_keys",
]

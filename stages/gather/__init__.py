"""gather: find a run's artifacts (Ray nsight folders, save_path, Hydra config) and say what each is."""
from .discover import (
    GatherResult,
    default_sources,
    gather,
    hash_artifact,
    ray_nsight_dir,
    ray_temp_dirs,
    unreadable,
)

__all__ = [
    "GatherResult", "default_sources", "gather", "hash_artifact", "ray_nsight_dir", "ray_temp_dirs",
    "unreadable",
]

"""The run's composed Hydra config (`.hydra/config.yaml`): no profiler output, but an input all the
same. Gather finds it by its content (stages/readers/hydra_config.py) and reads the run's roles
and profiled steps from it; collect reads it once more in pass 1 for the secret values it holds
(API keys, tokens), which become known values of the run's one pseudonym map. Nothing of it is
summarized or published.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ...core.formats import register
from ...core.model import ArtifactKind
from ...readers.hydra_config import is_hydra_config
from ...readers.naming import NameInfo
from ...scrub import find_config_identities
from ..base import BaseFormat

CONFIG = ArtifactKind.HYDRA_CONFIG


class HydraConfigFormat(BaseFormat):
    kind = "config"
    file_kinds = (CONFIG,)
    profile = False
    run_config = True
    labels = {CONFIG: "config"}
    #: why it has no summarize row (manifest.json's statuses)
    unread_reason = "the run's config: read for roles and steps, not summarized"

    def classify(self, rel: str) -> NameInfo | None:
        return None   # found by its content, not its name (`claim`)

    def claim(self, path: Path) -> NameInfo | None:
        return self.found_near(path) if path.name == "config.yaml" and is_hydra_config(path) else None

    def found_near(self, path: Path) -> NameInfo:
        """The config gather found beside a source (`find_config_near` read it already)."""
        return NameInfo(CONFIG, "hydra_config")

    def reads_in_place(self, artifact: Any) -> bool:
        return True

    def find_identities(self, path: Path, policy: Any) -> Any:
        return find_config_identities(path, policy)


FORMAT = register(HydraConfigFormat())

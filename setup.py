"""Package discovery for verlprof's flat layout (everything else is in pyproject.toml).

Why this file: the folders `pipeline/` and `stages/` install as `verlprof.pipeline` and
`verlprof.stages`, and pyproject's `[tool.setuptools.packages.find]` names what it finds after the
folders (`pipeline.report`), not after the installed name. A hand-written list forgot
`verlprof.pipeline.report` once; here every package below the two folders is found.
"""
from setuptools import find_packages, setup

setup(packages=[f"verlprof.{name}" for name in find_packages(include=["pipeline", "pipeline.*", "stages", "stages.*"])])

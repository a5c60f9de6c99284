"""verlprof.stages: one package per stage, in pipeline order.

    gather/ -> export/ -> scrub/ -> window/ -> summarize/ + traces/      (doctor/: checks before and after a run)

Each stage package's `__init__` names its public entry points; everything else in it is that
stage's own room. Below the stages: `readers/` (one reader per input format), `schema.py` (the
declared output schema) and `core/` (artifact model, errors, atomic writes, hashing, done records),
which imports nothing else of the project. Nothing here imports `verlprof.pipeline`.
"""

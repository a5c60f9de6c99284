"""verlprof.pipeline: what ties the stages together (CLI, run/bundle model, stage runner, executors)."""

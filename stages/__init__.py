"""verlprof.stages: one module per stage (gather, export, scrub, window, summarize) plus readers/."""

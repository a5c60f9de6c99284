"""The base every stage and the pipeline stand on: artifact model, errors, atomic writes, content
hashes, done records (resume after a crash) and the canonical stage vocabulary.

It imports nothing else of the project, so any module may depend on it.
"""

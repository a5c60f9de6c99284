"""Readers of each input format: file names, nsys SQLite exports, chrome traces, memory snapshots."""

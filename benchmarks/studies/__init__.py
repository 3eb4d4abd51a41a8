"""Studies: quality and privacy, measured rather than timed: detector recall, recovery after sharing, hostile metadata and sidecars (python -m benchmarks.studies.<name>)."""

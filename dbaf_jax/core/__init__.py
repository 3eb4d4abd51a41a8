"""The foundations every other layer stands on, importing nothing of the package above
them: the error types (`errors`), compute precision (`precision`), device meshes and
batch sharding (`sharding`), the host-to-device pipeline (`pipeline`), the compilation
cache (`compilation_cache`), the size bounds of sidecars and metadata (`sidecars`) and
per-image pixel metrics (`image_metrics`)."""

LAYER = "foundations"

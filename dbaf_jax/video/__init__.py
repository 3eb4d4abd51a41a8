"""Reversible video anonymization: decode/encode (`clip`), face tracks with per-track
keys and temporal smoothing (`tracks`), the recovery sidecar (`sidecar`) and the runs
the commands call (`runner`). See docs/video.md."""

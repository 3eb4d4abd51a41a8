"""Reversible video anonymization: decode/encode (`clip`), face tracks with per-track
keys and temporal smoothing (`tracks`), the recovery sidecar (`sidecar`), the runs
the commands call (`runner`; its two passes `passes`, its `report`, what a user sets
`settings`) and a folder run's clips (`folders`). See docs/video.md."""

LAYER = "applications"

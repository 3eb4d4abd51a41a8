"""Faces in photos: detection (`detectors`), alignment, masks and paste-back, the face ledger."""

LAYER = "faces"

"""Training of both DBAF stages."""

LAYER = "applications"

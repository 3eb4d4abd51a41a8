"""Training of both DBAF stages."""

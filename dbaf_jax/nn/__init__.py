"""Building blocks shared by the networks (all NHWC)."""

LAYER = "foundations"

"""Building blocks shared by the networks (all NHWC)."""

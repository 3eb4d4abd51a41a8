"""Speed measurements (run as ``python -m benchmarks.<name>``); never asserted in tests.

Every benchmark runs with the runtime requirements alone: no PyTorch, nothing imported
from tests/ (photos are read from tests/data as files; inputs the tests use too, such as
the canvases of labelled photos, come from fixtures/). The exceptions are the
comparisons with PyTorch in `TORCH_COMPARISONS`, whose point is timing a PyTorch
reference beside our networks: they need the ``[dev]`` install and import the parity
references of tests/torch_reference.
"""

TORCH_COMPARISONS = (
    "encoders",
    "stylegan2",
    "metric_networks",
    "evaluate",
    "reference_pytorch",
    "reference_anonymize",
)

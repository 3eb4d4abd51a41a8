"""BatchNorm running statistics measured on inputs, for parity tests of deep random networks."""

import torch
from torch import nn


def calibrate_batch_norm_(module: nn.Module, inputs: torch.Tensor) -> nn.Module:
    """Replaces every BatchNorm's running mean and variance by the statistics of its input
    over ``inputs`` (one forward pass), then returns ``module`` in eval mode.

    With random running statistics (tests.parity.randomize_) a deep network's output is
    dominated by the constant offsets the BatchNorms add: two different images give
    features within a fraction of a percent of each other, so a parity test would barely
    check the path from the input. Measured statistics normalise the real activations,
    as a trained network's do, and the output depends on the image at order one. The
    affine weights and biases stay random.
    """
    norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average: after one batch, that batch's statistics
        norm.train()
    with torch.no_grad():
        module(inputs)
    for norm, momentum in zip(norms, momenta):
        norm.momentum = momentum
    return module.eval()

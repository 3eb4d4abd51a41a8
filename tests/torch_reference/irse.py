"""PyTorch IR-SE body with the public key names (`input_layer.*`, `body.{i}.res_layer.*`,
`body.{i}.shortcut_layer.*`), at a configurable width, as a parity reference."""

import torch
from torch import nn

STAGE_UNITS = {50: (3, 4, 14, 3), 100: (3, 13, 30, 3), 152: (3, 8, 36, 3)}


def scaled(channels: int, width_scale: float) -> int:
    return max(1, int(round(channels * width_scale)))


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, reduction: int = 16):
        super().__init__()
        self.fc1 = nn.Conv2d(channels, channels // reduction, 1, bias=False)
        self.fc2 = nn.Conv2d(channels // reduction, channels, 1, bias=False)

    def forward(self, x):
        gate = x.mean(dim=(2, 3), keepdim=True)
        return x * torch.sigmoid(self.fc2(torch.relu(self.fc1(gate))))


class BottleneckIRSE(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        if in_channels == out_channels:
            self.shortcut_layer = nn.MaxPool2d(1, stride)
        else:
            self.shortcut_layer = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )
        self.res_layer = nn.Sequential(
            nn.BatchNorm2d(in_channels),
            nn.Conv2d(in_channels, out_channels, 3, 1, 1, bias=False),
            nn.PReLU(out_channels),
            nn.Conv2d(out_channels, out_channels, 3, stride, 1, bias=False),
            nn.BatchNorm2d(out_channels),
            SqueezeExcite(out_channels),
        )

    def forward(self, x):
        return self.res_layer(x) + self.shortcut_layer(x)


def make_stem(width_scale: float = 1.0) -> nn.Sequential:
    channels = scaled(64, width_scale)
    return nn.Sequential(
        nn.Conv2d(3, channels, 3, 1, 1, bias=False), nn.BatchNorm2d(channels), nn.PReLU(channels)
    )


def make_body(num_layers: int = 50, width_scale: float = 1.0) -> nn.Sequential:
    units = []
    in_channels = scaled(64, width_scale)
    for count, channels in zip(STAGE_UNITS[num_layers], (64, 128, 256, 512)):
        out_channels = scaled(channels, width_scale)
        for k in range(count):
            units.append(BottleneckIRSE(in_channels, out_channels, 2 if k == 0 else 1))
            in_channels = out_channels
    return nn.Sequential(*units)


class IRSEBody(nn.Module):
    """Stem + body; forward returns the stem output and every unit's output."""

    def __init__(self, num_layers: int = 50, width_scale: float = 1.0):
        super().__init__()
        self.input_layer = make_stem(width_scale)
        self.body = make_body(num_layers, width_scale)

    def forward(self, x):
        stem = self.input_layer(x)
        units, h = [], stem
        for unit in self.body:
            h = unit(h)
            units.append(h)
        return stem, units


def randomize_irse_(module: nn.Module, seed: int = 0) -> nn.Module:
    """Random weights, BatchNorm statistics and PReLU slopes (tests.parity.randomize_), with
    every Conv2d/Linear weight divided by sqrt(fan_in) so that activations stay of order
    one through the 24 residual units and every branch contributes to the output."""
    from tests.parity import randomize_

    randomize_(module, seed)
    with torch.no_grad():
        for layer in module.modules():
            if isinstance(layer, (nn.Conv2d, nn.Linear)):
                layer.weight /= layer.weight[0].numel() ** 0.5
    return module.eval()

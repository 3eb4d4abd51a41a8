"""PyTorch e4e / pSp encoders with the public key names (`input_layer.*`, `body.*`,
`styles.{i}.convs.*`, `styles.{i}.linear.*`, `latlayer1/2.*`), at configurable widths,
returning (codes without latent_avg, c3, c2, c1) as DBAF's copy of Encoder4Editing does;
plus the pSp pipeline (encoder, latent_avg, decoder with its stored noise, face_pool)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from tests.torch_reference.irse import make_body, make_stem, scaled
from tests.torch_reference.stylegan2 import EqualLinear


class GradualStyleBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, spatial: int):
        super().__init__()
        self.out_channels = out_channels
        layers = []
        for i in range(int(math.log2(spatial))):
            layers += [
                nn.Conv2d(in_channels if i == 0 else out_channels, out_channels, 3, 2, 1),
                nn.LeakyReLU(),
            ]
        self.convs = nn.Sequential(*layers)
        self.linear = EqualLinear(out_channels, out_channels, lr_mul=1.0)

    def forward(self, x):
        return self.linear(self.convs(x).view(-1, self.out_channels))


def upsample_add(x, y):
    return F.interpolate(x, size=y.shape[2:], mode="bilinear", align_corners=True) + y


class GradualStyleEncoder(nn.Module):
    """pSp: every latent from its own style block."""

    coarse_ind, middle_ind = 3, 7

    def __init__(
        self,
        stylegan_size: int = 256,
        style_dim: int = 512,
        width_scale: float = 1.0,
        input_size: int = 256,
    ):
        super().__init__()
        top = scaled(512, width_scale)
        self.input_layer = make_stem(width_scale)
        self.body = make_body(50, width_scale)
        self.style_count = 2 * int(math.log2(stylegan_size)) - 2
        # c3, p2 and p1 are the input downsampled by 16, 8 and 4 (16, 32, 64 px for the public 256 px input).
        self.styles = nn.ModuleList(
            GradualStyleBlock(
                top,
                style_dim,
                input_size // (16 if i < self.coarse_ind else 8 if i < self.middle_ind else 4),
            )
            for i in range(self.style_count)
        )
        self.latlayer1 = nn.Conv2d(scaled(256, width_scale), top, 1)
        self.latlayer2 = nn.Conv2d(scaled(128, width_scale), top, 1)

    def maps(self, x):
        x = self.input_layer(x)
        for i, unit in enumerate(self.body):
            x = unit(x)
            if i == 6:
                c1 = x
            elif i == 20:
                c2 = x
            elif i == 23:
                c3 = x
        return c3, c2, c1

    def forward(self, x):
        c3, c2, c1 = self.maps(x)
        p2 = upsample_add(c3, self.latlayer1(c2))
        p1 = upsample_add(p2, self.latlayer2(c1))
        latents = [
            self.styles[j](c3 if j < self.coarse_ind else p2 if j < self.middle_ind else p1)
            for j in range(self.style_count)
        ]
        return torch.stack(latents, dim=1), c3, c2, c1


class Encoder4Editing(GradualStyleEncoder):
    """e4e: w0 from style block 0 repeated, plus deltas w[:, i] += styles[i](features)."""

    def forward(self, x):
        c3, c2, c1 = self.maps(x)
        w0 = self.styles[0](c3)
        w = w0.repeat(self.style_count, 1, 1).permute(1, 0, 2)
        features = c3
        for i in range(1, self.style_count):
            if i == self.coarse_ind:
                p2 = upsample_add(c3, self.latlayer1(c2))
                features = p2
            elif i == self.middle_ind:
                p1 = upsample_add(p2, self.latlayer2(c1))
                features = p1
            w[:, i] += self.styles[i](features)
        return w, c3, c2, c1


class PSP(nn.Module):
    """pSp's module layout (`encoder.*`, `decoder.*`) and its forward with
    start_from_latent_avg, randomize_noise=False and resize=True."""

    def __init__(self, encoder: nn.Module, decoder: nn.Module, latent_avg: torch.Tensor):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.latent_avg = latent_avg

    def forward(self, x):
        codes = self.encoder(x)[0] + self.latent_avg.repeat(x.shape[0], 1, 1)
        images = self.decoder(codes)
        return F.adaptive_avg_pool2d(images, (256, 256)), codes

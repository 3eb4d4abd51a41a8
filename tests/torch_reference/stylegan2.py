"""PyTorch StyleGAN2 with rosinality's state_dict layout and forward semantics (tests only).

Written from the facts of rosinality/stylegan2-pytorch (model.py, op/upfirdn2d.py's
native path): parameter and buffer names and shapes equal those of ``g_ema`` / ``g`` /
``d`` in ``stylegan2-ffhq-256.pt``. The modulated convolution is the per-sample grouped
form (the definition), upfirdn2d is the pure-PyTorch path, nothing needs CUDA.

``width_scale`` multiplies every channel count so tests can run narrow copies.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F

BLUR_TAPS = (1.0, 3.0, 3.0, 1.0)


def channels_at(resolution, channel_multiplier=2, width_scale=1.0):
    base = 512 if resolution <= 32 else (16384 // resolution) * channel_multiplier
    return int(base * width_scale)


def blur_kernel(gain=1.0):
    taps = torch.tensor(BLUR_TAPS)
    kernel = taps[:, None] * taps[None, :]
    return kernel / kernel.sum() * gain


def upfirdn2d(x, kernel, up=1, down=1, pad=(0, 0)):
    """Zero-insertion upsampling, padding, true convolution per channel, decimation (NCHW)."""
    batch, channels, height, width = x.shape
    p0, p1 = pad
    x = x.reshape(batch * channels, 1, height, 1, width, 1)
    x = F.pad(x, [0, up - 1, 0, 0, 0, up - 1])
    x = x.reshape(batch * channels, 1, height * up, width * up)
    x = F.pad(x, [max(p0, 0), max(p1, 0), max(p0, 0), max(p1, 0)])
    x = x[:, :, max(-p0, 0) : x.shape[2] - max(-p1, 0), max(-p0, 0) : x.shape[3] - max(-p1, 0)]
    x = F.conv2d(x, torch.flip(kernel, [0, 1])[None, None])
    x = x[:, :, ::down, ::down]
    return x.reshape(batch, channels, x.shape[2], x.shape[3])


def fused_leaky_relu(x, bias):
    shape = [1, -1] + [1] * (x.ndim - 2)
    return F.leaky_relu(x + bias.view(*shape), 0.2) * math.sqrt(2)


class PixelNorm(nn.Module):
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + 1e-8)


class EqualLinear(nn.Module):
    def __init__(self, in_dim, out_dim, bias_init=0.0, lr_mul=1.0, activation=False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_dim, in_dim) / lr_mul)
        self.bias = nn.Parameter(torch.full((out_dim,), float(bias_init)))
        self.scale = lr_mul / math.sqrt(in_dim)
        self.lr_mul = lr_mul
        self.activation = activation

    def forward(self, x):
        y = F.linear(x, self.weight * self.scale)
        if self.activation:
            return fused_leaky_relu(y, self.bias * self.lr_mul)
        return y + self.bias * self.lr_mul


class EqualConv2d(nn.Module):
    def __init__(self, in_ch, out_ch, kernel_size, stride=1, padding=0, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_ch, in_ch, kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.zeros(out_ch)) if bias else None
        self.scale = 1 / math.sqrt(in_ch * kernel_size**2)
        self.stride, self.padding = stride, padding

    def forward(self, x):
        return F.conv2d(
            x, self.weight * self.scale, self.bias, stride=self.stride, padding=self.padding
        )


class Blur(nn.Module):
    def __init__(self, pad, gain=1.0):
        super().__init__()
        self.register_buffer("kernel", blur_kernel(gain))
        self.pad, self.gain = pad, gain

    def forward(self, x):
        return upfirdn2d(x, self.kernel, pad=self.pad)


class Upsample(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("kernel", blur_kernel(4.0))
        self.gain = 4.0

    def forward(self, x):
        return upfirdn2d(x, self.kernel, up=2, pad=(2, 1))


def reset_fixed_kernels_(module):
    """Puts the fixed blur kernels back after `tests.parity.randomize_` overwrote every buffer."""
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, (Blur, Upsample)):
                sub.kernel.copy_(blur_kernel(sub.gain))
    return module


class ModulatedConv2d(nn.Module):
    """Per-sample weights ``W * s_b``, demodulated, applied as one grouped convolution."""

    def __init__(self, in_ch, out_ch, kernel_size, style_dim, demodulate=True, upsample=False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1, out_ch, in_ch, kernel_size, kernel_size))
        self.modulation = EqualLinear(style_dim, in_ch, bias_init=1.0)
        self.scale = 1 / math.sqrt(in_ch * kernel_size**2)
        self.demodulate, self.upsample = demodulate, upsample
        self.in_ch, self.out_ch, self.k = in_ch, out_ch, kernel_size
        if upsample:
            self.blur = Blur(pad=(1, 1), gain=4.0)

    def forward(self, x, style):
        batch, _, height, width = x.shape
        s = self.modulation(style).view(batch, 1, self.in_ch, 1, 1)
        weight = self.scale * self.weight * s  # (B, out, in, k, k)
        if self.demodulate:
            weight = weight * torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8).view(
                batch, self.out_ch, 1, 1, 1
            )
        x = x.reshape(1, batch * self.in_ch, height, width)
        if self.upsample:
            weight = weight.transpose(1, 2).reshape(batch * self.in_ch, self.out_ch, self.k, self.k)
            out = F.conv_transpose2d(x, weight, stride=2, padding=0, groups=batch)
            out = out.view(batch, self.out_ch, out.shape[2], out.shape[3])
            return self.blur(out)
        weight = weight.reshape(batch * self.out_ch, self.in_ch, self.k, self.k)
        out = F.conv2d(x, weight, padding=self.k // 2, groups=batch)
        return out.view(batch, self.out_ch, height, width)


class NoiseInjection(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))

    def forward(self, x, noise):
        return x + self.weight * noise


class FusedLeakyReLU(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x):
        return fused_leaky_relu(x, self.bias)


class ConstantInput(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.input = nn.Parameter(torch.randn(1, channels, 4, 4))

    def forward(self, batch):
        return self.input.repeat(batch, 1, 1, 1)


class StyledConv(nn.Module):
    def __init__(self, in_ch, out_ch, style_dim, upsample=False):
        super().__init__()
        self.conv = ModulatedConv2d(in_ch, out_ch, 3, style_dim, upsample=upsample)
        self.noise = NoiseInjection()
        self.activate = FusedLeakyReLU(out_ch)

    def forward(self, x, style, noise):
        return self.activate(self.noise(self.conv(x, style), noise))


class ToRGB(nn.Module):
    def __init__(self, in_ch, style_dim, upsample=True):
        super().__init__()
        if upsample:
            self.upsample = Upsample()
        self.conv = ModulatedConv2d(in_ch, 3, 1, style_dim, demodulate=False)
        self.bias = nn.Parameter(torch.zeros(1, 3, 1, 1))

    def forward(self, x, style, skip=None):
        out = self.conv(x, style) + self.bias
        if skip is not None:
            out = out + self.upsample(skip)
        return out


class Generator(nn.Module):
    def __init__(self, size, style_dim, n_mlp, channel_multiplier=2, width_scale=1.0, lr_mlp=0.01):
        super().__init__()
        ch = lambda r: channels_at(r, channel_multiplier, width_scale)  # noqa: E731
        self.log_size = int(math.log2(size))
        self.n_latent = 2 * self.log_size - 2
        self.num_layers = 2 * self.log_size - 3
        self.style = nn.Sequential(
            PixelNorm(),
            *[
                EqualLinear(style_dim, style_dim, lr_mul=lr_mlp, activation=True)
                for _ in range(n_mlp)
            ],
        )
        self.input = ConstantInput(ch(4))
        self.conv1 = StyledConv(ch(4), ch(4), style_dim)
        self.to_rgb1 = ToRGB(ch(4), style_dim, upsample=False)
        self.convs = nn.ModuleList()
        self.to_rgbs = nn.ModuleList()
        self.noises = nn.Module()
        for i in range(self.num_layers):
            res = 2 ** ((i + 5) // 2)
            self.noises.register_buffer(f"noise_{i}", torch.randn(1, 1, res, res))
        in_ch = ch(4)
        for log_res in range(3, self.log_size + 1):
            out_ch = ch(2**log_res)
            self.convs.append(StyledConv(in_ch, out_ch, style_dim, upsample=True))
            self.convs.append(StyledConv(out_ch, out_ch, style_dim))
            self.to_rgbs.append(ToRGB(out_ch, style_dim))
            in_ch = out_ch

    def forward(self, styles_wplus, noise=None, return_features=False):
        """W+ (B, n_latent, style_dim) -> image (B, 3, size, size).

        ``noise``: optional {index: tensor} replacing the stored buffers at those layers
        (as DBAF's model_revise_c3 does with MAAR's maps at 3-8).
        """
        noises = [getattr(self.noises, f"noise_{i}") for i in range(self.num_layers)]
        for i, value in (noise or {}).items():
            noises[i] = value
        latent = styles_wplus
        features = {}
        out = self.conv1(self.input(latent.shape[0]), latent[:, 0], noises[0])
        skip = self.to_rgb1(out, latent[:, 1])
        features["features_4"], features["rgb_4"] = out, skip
        for j, to_rgb in enumerate(self.to_rgbs):
            out = self.convs[2 * j](out, latent[:, 1 + 2 * j], noises[1 + 2 * j])
            out = self.convs[2 * j + 1](out, latent[:, 2 + 2 * j], noises[2 + 2 * j])
            skip = to_rgb(out, latent[:, 3 + 2 * j], skip)
            res = 2 ** (j + 3)
            features[f"features_{res}"], features[f"rgb_{res}"] = out, skip
        return (skip, features) if return_features else skip


class ConvLayer(nn.Sequential):
    def __init__(self, in_ch, out_ch, kernel_size, downsample=False, activate=True):
        layers = []
        if downsample:
            p = len(BLUR_TAPS) - 2 + (kernel_size - 1)
            layers.append(Blur(pad=((p + 1) // 2, p // 2)))
            layers.append(EqualConv2d(in_ch, out_ch, kernel_size, stride=2, padding=0, bias=False))
        else:
            layers.append(
                EqualConv2d(in_ch, out_ch, kernel_size, padding=kernel_size // 2, bias=False)
            )
        if activate:
            layers.append(FusedLeakyReLU(out_ch))
        super().__init__(*layers)


class ResBlock(nn.Module):
    def __init__(self, in_ch, out_ch):
        super().__init__()
        self.conv1 = ConvLayer(in_ch, in_ch, 3)
        self.conv2 = ConvLayer(in_ch, out_ch, 3, downsample=True)
        self.skip = ConvLayer(in_ch, out_ch, 1, downsample=True, activate=False)

    def forward(self, x):
        return (self.conv2(self.conv1(x)) + self.skip(x)) / math.sqrt(2)


class Discriminator(nn.Module):
    def __init__(self, size, channel_multiplier=2, width_scale=1.0):
        super().__init__()
        ch = lambda r: channels_at(r, channel_multiplier, width_scale)  # noqa: E731
        log_size = int(math.log2(size))
        convs = [ConvLayer(3, ch(size), 1)]
        in_ch = ch(size)
        for log_res in range(log_size, 2, -1):
            convs.append(ResBlock(in_ch, ch(2 ** (log_res - 1))))
            in_ch = ch(2 ** (log_res - 1))
        self.convs = nn.Sequential(*convs)
        self.final_conv = ConvLayer(in_ch + 1, ch(4), 3)
        self.final_linear = nn.Sequential(
            EqualLinear(ch(4) * 16, ch(4), activation=True),
            EqualLinear(ch(4), 1),
        )

    def forward(self, x):
        out = self.convs(x)
        batch, channels, height, width = out.shape
        group = min(batch, 4)
        stddev = out.view(group, -1, 1, channels, height, width)
        stddev = torch.sqrt(stddev.var(0, unbiased=False) + 1e-8)
        stddev = stddev.mean([2, 3, 4], keepdim=True).squeeze(2)
        out = torch.cat([out, stddev.repeat(group, 1, height, width)], 1)
        out = self.final_conv(out)
        return self.final_linear(out.view(batch, -1))

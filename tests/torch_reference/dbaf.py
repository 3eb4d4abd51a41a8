"""PyTorch references for DBAF's own networks, with the authors' state_dict layouts.

Written from the facts of the reference code (mrzhu-cool/DBAF): module names and
nesting are chosen so that ``state_dict()`` keys equal those of the files it saves:

- `DisentanglementId` (CID, ``w_disentanglement*.pth``): ``linear_w.*``,
  ``pos_embedding`` (n_latent, 1, dim), ``layers.{g}.transformer.layers.{i}.0.norm.*``,
  ``...0.fn.to_qkv.weight``, ``...0.fn.to_out.0.*``, ``...1.norm.*``,
  ``...1.fn.net.0.*``, ``...1.fn.net.3.*``.
- `AttrBlock` (MAAR, ``attr_block*.pth``): ``conv_c{3,2,1}.*`` and
  ``cbam_c{3,2,1}.ChannelGate.mlp.{1,3}.*``, ``cbam_c*.SpatialGate.spatial.conv.weight``,
  ``cbam_c*.SpatialGate.spatial.bn.*``.
- `AnonymizationNet` (KRIA, ``*id_mlp*.pth``): ``mapper.{0,1,2}.model.{0..7}.{weight,bias}``.

Widths are arguments so tests can run reduced copies; the defaults are the reference's.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F

# ---------------------------------------------------------------- CID


class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x):
        return self.fn(self.norm(x))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim, dropout):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, hidden_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, dim),
            nn.Dropout(dropout),
        )

    def forward(self, x):
        return self.net(x)


class Attention(nn.Module):
    """Multi-head self-attention over axis 1 of a (b, n, dim) input."""

    def __init__(self, dim, heads, dim_head, dropout):
        super().__init__()
        inner = heads * dim_head
        self.heads = heads
        self.scale = dim_head**-0.5
        self.dropout = nn.Dropout(dropout)
        self.to_qkv = nn.Linear(dim, inner * 3, bias=False)
        self.to_out = nn.Sequential(nn.Linear(inner, dim), nn.Dropout(dropout))

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = (
            t.reshape(b, n, self.heads, -1).transpose(1, 2) for t in self.to_qkv(x).chunk(3, dim=-1)
        )
        attn = self.dropout(torch.softmax(q @ k.transpose(-1, -2) * self.scale, dim=-1))
        out = (attn @ v).transpose(1, 2).reshape(b, n, -1)
        return self.to_out(out)


class Transformer(nn.Module):
    def __init__(self, dim, depth, heads, dim_head, mlp_dim, dropout):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.ModuleList(
                [
                    PreNorm(dim, Attention(dim, heads, dim_head, dropout)),
                    PreNorm(dim, FeedForward(dim, mlp_dim, dropout)),
                ]
            )
            for _ in range(depth)
        )

    def forward(self, x):
        for attn, ff in self.layers:
            x = attn(x) + x
            x = ff(x) + x
        return x


class ViT(nn.Module):
    def __init__(self, dim=512, depth=6, heads=14, mlp_dim=2048, dim_head=64, dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.transformer = Transformer(dim, depth, heads, dim_head, mlp_dim, dropout)

    def forward(self, x):
        return self.transformer(self.dropout(x))


class DisentanglementId(nn.Module):
    """CID as the reference runs it, minus the e4e call: codes (B, n, dim) in, A out.

    The permute to (layers, batch, dim) makes every ViT attend across the batch,
    separately for each latent layer, exactly as in the reference.
    """

    def __init__(
        self, dim=512, n_latent=14, groups=(4, 4, 6), depth=6, heads=14, dim_head=64, mlp_dim=2048
    ):
        super().__init__()
        self.linear_w = nn.Linear(dim, dim)
        self.pos_embedding = nn.Parameter(torch.randn(n_latent, 1, dim))
        self.layers = nn.Sequential(
            *[
                ViT(dim=dim, depth=depth, heads=heads, mlp_dim=mlp_dim, dim_head=dim_head)
                for _ in range(3)
            ]
        )
        self.split_list = list(groups)

    def forward(self, codes):
        pos = torch.split(self.pos_embedding, self.split_list, dim=0)
        x = self.linear_w(codes.permute(1, 0, 2))
        parts = torch.split(x, self.split_list, dim=0)
        out = torch.cat([self.layers[g](parts[g] + pos[g]) for g in range(3)], dim=0)
        return out.permute(1, 0, 2)


# ---------------------------------------------------------------- MAAR


class BasicConv(nn.Module):
    def __init__(self, in_planes, out_planes, kernel_size, padding):
        super().__init__()
        self.conv = nn.Conv2d(in_planes, out_planes, kernel_size, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(out_planes, eps=1e-5, momentum=0.01, affine=True)

    def forward(self, x):
        return self.bn(self.conv(x))


class ChannelGate(nn.Module):
    def __init__(self, channels, reduction=16):
        super().__init__()
        hidden = channels // reduction
        self.mlp = nn.Sequential(
            nn.Flatten(), nn.Linear(channels, hidden), nn.ReLU(), nn.Linear(hidden, channels)
        )

    def forward(self, x):
        avg = F.avg_pool2d(x, x.shape[2:], stride=x.shape[2:])
        mx = F.max_pool2d(x, x.shape[2:], stride=x.shape[2:])
        return x * torch.sigmoid(self.mlp(avg) + self.mlp(mx))[:, :, None, None]


class SpatialGate(nn.Module):
    def __init__(self):
        super().__init__()
        self.spatial = BasicConv(2, 1, 7, padding=3)

    def forward(self, x):
        pooled = torch.cat([x.max(dim=1, keepdim=True)[0], x.mean(dim=1, keepdim=True)], dim=1)
        return x * torch.sigmoid(self.spatial(pooled))


class CBAM(nn.Module):
    def __init__(self, channels, reduction=16):
        super().__init__()
        self.ChannelGate = ChannelGate(channels, reduction)
        self.SpatialGate = SpatialGate()

    def forward(self, x):
        return self.SpatialGate(self.ChannelGate(x))


class AttrBlock(nn.Module):
    def __init__(self, in_channels=(512, 256, 128), channels=512, reduction=16):
        super().__init__()
        self.cbam_c3 = CBAM(channels, reduction)
        self.cbam_c2 = CBAM(channels, reduction)
        self.cbam_c1 = CBAM(channels, reduction)
        self.conv_c3 = nn.Conv2d(in_channels[0], channels, 1)
        self.conv_c2 = nn.Conv2d(in_channels[1], channels, 1)
        self.conv_c1 = nn.Conv2d(in_channels[2], channels, 1)

    def forward(self, c3, c2, c1):
        return (
            self.cbam_c3(self.conv_c3(c3)),
            self.cbam_c2(self.conv_c2(c2)),
            self.cbam_c1(self.conv_c1(c1)),
        )


# ---------------------------------------------------------------- KRIA


class EqualLinear(nn.Module):
    """rosinality's EqualLinear with the fused leaky ReLU (the only form KRIA uses)."""

    def __init__(self, in_dim, out_dim, lr_mul):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_dim, in_dim).div_(lr_mul))
        self.bias = nn.Parameter(torch.zeros(out_dim))
        self.scale = lr_mul / math.sqrt(in_dim)
        self.lr_mul = lr_mul

    def forward(self, x):
        out = F.linear(x, self.weight * self.scale)
        return F.leaky_relu(out + self.bias * self.lr_mul, 0.2) * math.sqrt(2)


class cMLP(nn.Module):  # noqa: N801 - the reference's name
    def __init__(self, dim=512, extra_layers=4, lr_mul=0.01):
        super().__init__()
        layers = [
            EqualLinear(2 * dim, 4 * dim, lr_mul),
            EqualLinear(4 * dim, 2 * dim, lr_mul),
            EqualLinear(2 * dim, dim, lr_mul),
        ]
        layers += [EqualLinear(dim, dim, lr_mul) for _ in range(extra_layers)]
        layers.append(nn.Linear(dim, dim))
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        return self.model(x)


class AnonymizationNet(nn.Module):
    """Input (B, n_latent, 2*dim) = cat(identity, key); one cMLP per latent group."""

    def __init__(self, dim=512, groups=(4, 4, 6)):
        super().__init__()
        self.mapper = nn.ModuleList([cMLP(dim) for _ in range(3)])
        self.bounds = (groups[0], groups[0] + groups[1])

    def forward(self, w):
        outputs = []
        for i in range(w.size(1)):
            g = 0 if i < self.bounds[0] else 1 if i < self.bounds[1] else 2
            outputs.append(self.mapper[g](w[:, i, :]).unsqueeze(1))
        return torch.cat(outputs, dim=1)

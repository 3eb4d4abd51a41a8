"""PyTorch IR-SE ArcFace with the public `model_ir_se50.pth` key names, and DBAF's
`IDLossExtractor` preprocessing and intermediate maps, as a parity reference."""

import torch
import torch.nn.functional as F
from torch import nn

from tests.torch_reference.irse import make_body, make_stem, scaled


class Backbone(nn.Module):
    def __init__(self, num_layers: int = 50, width_scale: float = 1.0, embedding_dim: int = 512):
        super().__init__()
        channels = scaled(512, width_scale)
        self.input_layer = make_stem(width_scale)
        self.body = make_body(num_layers, width_scale)
        self.output_layer = nn.Sequential(
            nn.BatchNorm2d(channels),
            nn.Dropout(0.6),
            nn.Flatten(),
            nn.Linear(channels * 7 * 7, embedding_dim),
            nn.BatchNorm1d(embedding_dim),
        )

    def forward(self, x):
        x = self.output_layer(self.body(self.input_layer(x)))
        return x / torch.norm(x, 2, 1, True)


def extract_feats(net: Backbone, images: torch.Tensor, stage_ends=(2, 6, 20, 23)):
    """DBAF's IDLossExtractor.extract_feats: [stem, body unit 2, 6, 20, 23 maps, embedding]."""
    if images.shape[-1] != 256:
        images = F.adaptive_avg_pool2d(images, (256, 256))
    h = F.adaptive_avg_pool2d(images[:, :, 35:223, 32:220], (112, 112))
    h = net.input_layer(h)
    maps = [h]
    for i, unit in enumerate(net.body):
        h = unit(h)
        if i in stage_ends:
            maps.append(h)
    h = net.output_layer(h)
    return maps + [h / torch.norm(h, 2, 1, True)]

"""PyTorch face parsers with the public checkpoints' key layouts (written from the layout facts).

- `UNet`: DBAF's `unet` (parsenet.pth, 136 entries): ``{conv1..conv4,center}.conv{1,2}.{0,1}``,
  ``up_concat{4..1}.up`` (ConvTranspose2d 2x2 stride 2) and ``.conv``, ``final``.
- `BiSeNet`: face-parsing.PyTorch (79999_iter.pth, 191 entries): ``cp.resnet.*``,
  ``cp.arm16/arm32``, ``cp.conv_head32/16``, ``cp.conv_avg``, ``ffm.*``, ``conv_out{,16,32}``.
"""

import torch
import torch.nn.functional as F
from torch import nn


def conv_bn_relu_seq(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, 1, 1), nn.BatchNorm2d(cout), nn.ReLU())


class UNetBlock(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv1 = conv_bn_relu_seq(cin, cout)
        self.conv2 = conv_bn_relu_seq(cout, cout)

    def forward(self, x):
        return self.conv2(self.conv1(x))


class UNetUp(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = UNetBlock(cin, cout)
        self.up = nn.ConvTranspose2d(cin, cout, kernel_size=2, stride=2)

    def forward(self, skip, deeper):
        return self.conv(torch.cat([skip, self.up(deeper)], 1))


class UNet(nn.Module):
    def __init__(self, feature_scale: int = 4, n_classes: int = 19):
        super().__init__()
        w = [c // feature_scale for c in (64, 128, 256, 512, 1024)]
        self.conv1 = UNetBlock(3, w[0])
        self.conv2 = UNetBlock(w[0], w[1])
        self.conv3 = UNetBlock(w[1], w[2])
        self.conv4 = UNetBlock(w[2], w[3])
        self.center = UNetBlock(w[3], w[4])
        self.up_concat4 = UNetUp(w[4], w[3])
        self.up_concat3 = UNetUp(w[3], w[2])
        self.up_concat2 = UNetUp(w[2], w[1])
        self.up_concat1 = UNetUp(w[1], w[0])
        self.final = nn.Conv2d(w[0], n_classes, 1)

    def forward(self, x):
        c1 = self.conv1(x)
        c2 = self.conv2(F.max_pool2d(c1, 2))
        c3 = self.conv3(F.max_pool2d(c2, 2))
        c4 = self.conv4(F.max_pool2d(c3, 2))
        center = self.center(F.max_pool2d(c4, 2))
        up = self.up_concat4(c4, center)
        up = self.up_concat3(c3, up)
        up = self.up_concat2(c2, up)
        up = self.up_concat1(c1, up)
        return self.final(up)


class ConvBNReLU(nn.Module):
    def __init__(self, cin: int, cout: int, ks: int = 3, stride: int = 1, padding: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, ks, stride, padding, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if cin != cout or stride != 1:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        residual = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        shortcut = x if self.downsample is None else self.downsample(x)
        return F.relu(shortcut + residual)


class Resnet18(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = nn.Sequential(BasicBlock(64, 64), BasicBlock(64, 64))
        self.layer2 = nn.Sequential(BasicBlock(64, 128, 2), BasicBlock(128, 128))
        self.layer3 = nn.Sequential(BasicBlock(128, 256, 2), BasicBlock(256, 256))
        self.layer4 = nn.Sequential(BasicBlock(256, 512, 2), BasicBlock(512, 512))

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        feat8 = self.layer2(self.layer1(x))
        feat16 = self.layer3(feat8)
        return feat8, feat16, self.layer4(feat16)


class AttentionRefinementModule(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = ConvBNReLU(cin, cout)
        self.conv_atten = nn.Conv2d(cout, cout, 1, bias=False)
        self.bn_atten = nn.BatchNorm2d(cout)

    def forward(self, x):
        feat = self.conv(x)
        atten = F.avg_pool2d(feat, feat.size()[2:])
        return feat * torch.sigmoid(self.bn_atten(self.conv_atten(atten)))


class ContextPath(nn.Module):
    def __init__(self):
        super().__init__()
        self.resnet = Resnet18()
        self.arm16 = AttentionRefinementModule(256, 128)
        self.arm32 = AttentionRefinementModule(512, 128)
        self.conv_head32 = ConvBNReLU(128, 128)
        self.conv_head16 = ConvBNReLU(128, 128)
        self.conv_avg = ConvBNReLU(512, 128, ks=1, padding=0)

    def forward(self, x):
        feat8, feat16, feat32 = self.resnet(x)
        avg = self.conv_avg(F.avg_pool2d(feat32, feat32.size()[2:]))
        avg_up = F.interpolate(avg, feat32.size()[2:], mode="nearest")
        feat32_sum = self.arm32(feat32) + avg_up
        feat32_up = self.conv_head32(F.interpolate(feat32_sum, feat16.size()[2:], mode="nearest"))
        feat16_sum = self.arm16(feat16) + feat32_up
        feat16_up = self.conv_head16(F.interpolate(feat16_sum, feat8.size()[2:], mode="nearest"))
        return feat8, feat16_up, feat32_up


class FeatureFusionModule(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.convblk = ConvBNReLU(cin, cout, ks=1, padding=0)
        self.conv1 = nn.Conv2d(cout, cout // 4, 1, bias=False)
        self.conv2 = nn.Conv2d(cout // 4, cout, 1, bias=False)

    def forward(self, fsp, fcp):
        feat = self.convblk(torch.cat([fsp, fcp], 1))
        atten = F.avg_pool2d(feat, feat.size()[2:])
        atten = torch.sigmoid(self.conv2(F.relu(self.conv1(atten))))
        return feat * atten + feat


class BiSeNetOutput(nn.Module):
    def __init__(self, cin: int, mid: int, n_classes: int):
        super().__init__()
        self.conv = ConvBNReLU(cin, mid)
        self.conv_out = nn.Conv2d(mid, n_classes, 1, bias=False)

    def forward(self, x):
        return self.conv_out(self.conv(x))


class BiSeNet(nn.Module):
    def __init__(self, n_classes: int = 19):
        super().__init__()
        self.cp = ContextPath()
        self.ffm = FeatureFusionModule(256, 256)
        self.conv_out = BiSeNetOutput(256, 256, n_classes)
        self.conv_out16 = BiSeNetOutput(128, 64, n_classes)
        self.conv_out32 = BiSeNetOutput(128, 64, n_classes)

    def forward(self, x):
        size = x.size()[2:]
        feat8, cp8, cp16 = self.cp(x)
        outs = (self.conv_out(self.ffm(feat8, cp8)), self.conv_out16(cp8), self.conv_out32(cp16))
        return tuple(F.interpolate(o, size, mode="bilinear", align_corners=True) for o in outs)

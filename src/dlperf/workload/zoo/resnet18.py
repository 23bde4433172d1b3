"""`zoo:resnet18`: ResNet-18 written here (random weights, performance only), 3x224x224 inputs."""

from __future__ import annotations

from typing import Any

from dlperf.workload.base import Workload
from dlperf.workload.zoo.options import positive_ints

SUMMARY = "ResNet-18 (11.7M params), random weights, 224x224 images; performance only"


def build(num_classes: int = 1000) -> Any:
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.downsample: nn.Module = nn.Identity()
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + self.downsample(x))

    class ResNet18(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            layers = []
            cin = 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
                cin = cout
            self.layer1, self.layer2, self.layer3, self.layer4 = layers
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    torch.manual_seed(0)
    model = ResNet18()
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return model


def workload(image_size: int = 224, num_classes: int = 1000) -> Workload:
    import torch

    options = positive_ints("resnet18", [("image_size", image_size, 224), ("num_classes", num_classes, 1000)])

    def make_inputs(batch_size: int) -> tuple[Any, ...]:
        g = torch.Generator().manual_seed(batch_size)
        return (torch.randn(batch_size, 3, image_size, image_size, generator=g),)

    return Workload(
        name="resnet18" + options,
        make_model=lambda: build(num_classes),
        make_inputs=make_inputs,
        description=SUMMARY.replace("224x224", f"{image_size}x{image_size}")
        + (f", {num_classes} classes" if num_classes != 1000 else ""),
        source="zoo:resnet18" + options,
        kind="cnn",
        input_names=("image",),
        output_names=("logits",),
    )

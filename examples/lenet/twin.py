"""PyTorch twin of examples/lenet: the same LeNet, loss, optimizer and schedule, trained from
golden/init.safetensors (written by `lenet --export golden`: the initial weights and the first
batches halfgrad's shuffling DataLoader gave) for as many steps as it holds batches, in float32
and under torch.cpu.amp.autocast(dtype=torch.bfloat16). Writes golden/losses.txt, one line per
quantity, `mode name value value ...` with 9 significant digits (float32 round-trips):

    fp32 loss ...                      the loss of every step
    fp32 features.1.running_mean ...   each batch norm's running statistics after the last step

tests/examples/lenet_twin_test.cpp trains halfgrad's model from the same file and compares.
Dropout is 0 on both sides: the two generators draw different masks.

torch 1.13 on the CPU has no float16 autocast and no GradScaler, so there is no fp16 run here:
the test holds halfgrad's fp16 run against the fp32 losses.

The golden start is exported at a tenth of the program's learning rate, where 20 steps of two
correct 16-bit runs stay within the test's tolerances (tests/examples/lenet_twin_test.cpp says
why). Regenerate, from this folder, with Debian's PyTorch:

    <build>/examples/lenet --export golden --lr 0.005
    /usr/bin/python3 twin.py
"""
import os
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from twin_safetensors import read_safetensors  # noqa: E402
GOLDEN = os.path.join(HERE, "golden")



class LeNet(nn.Module):
    def __init__(self, classes=6, dropout=0.5):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2, bias=False), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(16 * 2 * 2, 84), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(84, classes))

    def forward(self, x):
        return self.classifier(self.features(x))


def train(tensors, metadata, autocast):
    model = LeNet(dropout=0.0)
    state = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    model.load_state_dict(state)
    model.train()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=float(metadata["lr"]),
                                momentum=float(metadata["momentum"]),
                                weight_decay=float(metadata["weight_decay"]))
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=int(metadata["total_steps"]))
    pixels, labels = tensors["batches.pixels"], tensors["batches.labels"]
    losses = []
    for step in range(pixels.shape[0]):
        images = pixels[step].float() / 255
        optimizer.zero_grad()
        with torch.cpu.amp.autocast(dtype=torch.bfloat16, enabled=autocast):
            loss = criterion(model(images), labels[step])
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    stats = {name: buffer for name, buffer in model.state_dict().items() if "running_" in name}
    return losses, stats


def main():
    torch.set_num_threads(1)
    tensors, metadata = read_safetensors(os.path.join(GOLDEN, "init.safetensors"))
    lines = []
    for mode, autocast in (("fp32", False), ("bf16", True)):
        losses, stats = train(tensors, metadata, autocast)
        lines.append(" ".join([mode, "loss"] + ["%.9g" % v for v in losses]))
        for name, value in stats.items():
            assert value.dtype == torch.float32, (name, value.dtype)
            lines.append(" ".join([mode, name] + ["%.9g" % v for v in value.tolist()]))
    with open(os.path.join(GOLDEN, "losses.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

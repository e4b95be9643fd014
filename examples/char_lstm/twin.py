# The PyTorch twin of char_lstm: the same model, loop, initial weights and batches, written as a
# PyTorch user writes it; it records the per-step losses and gradient norms in golden/losses.txt.
#
#   build/release/examples/char_lstm --export examples/char_lstm/golden --steps 20 \
#       --hidden-size 48 --embedding-dim 16 --batch-size 8 --dropout 0 --max-grad-norm 0.4
#   /usr/bin/python3 examples/char_lstm/twin.py
#
# The run's settings come from golden/init.safetensors' metadata. Dropout is 0 in the export, as
# torch's and halfgrad's generators would draw different masks. Two runs: fp32, and bf16 under
# torch.cpu.amp.autocast (torch 1.13 has no float16 autocast and no GradScaler on the CPU, so
# halfgrad's fp16 run is compared with the fp32 losses).
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from twin_safetensors import read_safetensors  # noqa: E402
GOLDEN = os.path.join(HERE, "golden")



class CharLSTM(nn.Module):
    def __init__(self, vocab_size, embedding_dim, hidden_size, num_layers, dropout):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_size, num_layers=num_layers, dropout=dropout,
                            batch_first=True)
        self.head = nn.Linear(hidden_size, vocab_size)

    def forward(self, tokens, state=None):
        output, state = self.lstm(self.embedding(tokens), state)
        return self.head(output), state


def train(tensors, settings, bf16):
    model = CharLSTM(int(settings["vocab_size"]), int(settings["embedding_dim"]),
                     int(settings["hidden_size"]), int(settings["num_layers"]),
                     float(settings["dropout"]))
    model.load_state_dict({k: v for k, v in tensors.items() if not k.startswith("batch.")})
    steps = int(settings["steps"])
    optimizer = torch.optim.Adam(model.parameters(), lr=float(settings["lr"]))
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    losses, norms = [], []
    for step in range(steps):
        inputs = tensors["batch.inputs"][step]
        targets = tensors["batch.targets"][step]
        optimizer.zero_grad()
        with torch.cpu.amp.autocast(dtype=torch.bfloat16, enabled=bf16):
            logits, _ = model(inputs)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float(settings["max_grad_norm"]))
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        norms.append(norm.item())
    return losses, norms


def main():
    torch.set_num_threads(1)
    tensors, settings = read_safetensors(os.path.join(GOLDEN, "init.safetensors"))
    fp32_losses, fp32_norms = train(tensors, settings, bf16=False)
    bf16_losses, bf16_norms = train(tensors, settings, bf16=True)
    with open(os.path.join(GOLDEN, "losses.txt"), "w") as out:
        out.write(f"# char_lstm twin: torch {torch.__version__}, "
                  f"{int(settings['steps'])} steps from init.safetensors\n")
        out.write("# step fp32_loss fp32_grad_norm bf16_loss bf16_grad_norm\n")
        for step in range(len(fp32_losses)):
            out.write(f"{step + 1} {fp32_losses[step]:.9g} {fp32_norms[step]:.9g} "
                      f"{bf16_losses[step]:.9g} {bf16_norms[step]:.9g}\n")


if __name__ == "__main__":
    main()

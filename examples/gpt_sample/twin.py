#!/usr/bin/env python3
"""The PyTorch twin of gpt_sample: the same character GPT, step and sampler, written as a
PyTorch user writes nanoGPT's train.py and sample.py, from the initial weights and window
starts that `gpt_sample --export` wrote (golden/init.safetensors).

  /usr/bin/python3 examples/gpt_sample/twin.py      (Debian's python3-torch, 1.13, CPU)

It trains --steps steps in fp32 and in bf16 (torch.autocast("cpu", bfloat16)); torch 1.13 has
no float16 autocast and no GradScaler on the CPU, so the fp16 + GradScaler run of halfgrad is
compared with the fp32 losses here. It writes golden/losses.txt:

  loss fp32 STEP LOSS GRAD_NORM       the loss before step STEP and the norm clipping saw
  loss bf16 STEP LOSS GRAD_NORM
  probs PROMPT_IDS... : ID:P ...      after the fp32 run, next_char_probs of the prompt at
                                      temperature 0.8, top-k 10 (the k kept characters)

The model is benchmarks/twin/gpt_model.py's GPT (halfgrad's nn::GPT as a PyTorch user writes
it); its keys differ only in the attention's names, mapped below.
"""
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from twin_safetensors import read_safetensors  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "..", "benchmarks", "twin"))
from gpt_model import GPT, GptConfig, param_groups  # noqa: E402

BLOCK, BATCH, LAYERS, HEADS, EMBD = 32, 16, 2, 4, 48
LR, MIN_LR, CLIP = 3e-3, 3e-4, 1.0
STEPS = 20
PROMPT = "The "
TEMPERATURE, TOP_K = 0.8, 10



def twin_key(key):
    """halfgrad's nn::GPT keys -> gpt_model.GPT's."""
    return (key.replace("attn.in_proj_weight", "in_proj.weight")
            .replace("attn.in_proj_bias", "in_proj.bias")
            .replace("attn.out_proj.", "out_proj."))


def main():
    with open(os.path.join(HERE, "text.txt"), "rb") as f:
        text = f.read()
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(c) for c in text], dtype=torch.int64)
    init, _ = read_safetensors(os.path.join(HERE, "golden", "init.safetensors"))
    starts = init.pop("starts")
    assert starts.shape == (STEPS, BATCH), starts.shape

    def batch(step):
        s = starts[step]
        x = torch.stack([ids[i:i + BLOCK] for i in s])
        y = torch.stack([ids[i + 1:i + 1 + BLOCK] for i in s])
        return x, y

    lines = []
    for mode in ("fp32", "bf16"):
        config = GptConfig(vocab=len(chars), block=BLOCK, layers=LAYERS, heads=HEADS, embd=EMBD,
                           batch=BATCH)
        model = GPT(config)
        model.load_state_dict({twin_key(k): v for k, v in init.items()}, strict=True)
        opt = torch.optim.AdamW(param_groups(model), lr=LR, betas=(0.9, 0.99), eps=1e-8)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS, eta_min=MIN_LR)
        for step in range(STEPS):
            x, y = batch(step)
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16"):
                logits = model(x)
                loss = F.cross_entropy(logits.reshape(-1, len(chars)), y.reshape(-1))
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            schedule.step()
            lines.append("loss %s %d %.10e %.10e" % (mode, step + 1, loss.item(), norm.item()))
        if mode == "fp32":
            model.eval()
            prompt = torch.tensor([[chars.index(c) for c in PROMPT.encode()]])
            with torch.no_grad():
                logits = model(prompt)[:, -1, :] / TEMPERATURE
                v, _ = torch.topk(logits, TOP_K)
                logits[logits < v[:, [-1]]] = -float("inf")
                probs = F.softmax(logits, dim=-1)[0]
            kept = [i for i in range(len(chars)) if probs[i] > 0]
            lines.append("probs " + " ".join(str(int(i)) for i in prompt[0]) + " : " +
                         " ".join("%d:%.10e" % (i, probs[i].item()) for i in kept))
    with open(os.path.join(HERE, "golden", "losses.txt"), "w") as f:
        f.write("# written by examples/gpt_sample/twin.py with torch %s\n" % torch.__version__)
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    main()

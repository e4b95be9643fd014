"""PyTorch twin of tests/data/sampler_test.cpp: prints, for each (n, num_replicas, drop_last)
without shuffle, the indices of every rank's DistributedSampler, as
`n num_replicas drop_last rank len : i i i ...`. The C++ test reads the committed output,
distributed_sampler.txt, and makes the same samplers with halfgrad.

Regenerate with Debian's PyTorch:  /usr/bin/python3 distributed_sampler.py
"""
import os

from torch.utils.data.distributed import DistributedSampler

CASES = [
    # n < num_replicas: padding repeats the whole order, more than once for n = 1 or 2
    (1, 4), (2, 5), (3, 4), (0, 3),
    # num_replicas divides n
    (8, 4), (12, 3), (6, 1), (5, 5),
    # it does not
    (10, 4), (7, 3), (11, 5), (13, 2), (9, 8),
]


def main():
    lines = []
    for n, replicas in CASES:
        for drop_last in (False, True):
            for rank in range(replicas):
                sampler = DistributedSampler(range(n), num_replicas=replicas, rank=rank,
                                             shuffle=False, drop_last=drop_last)
                indices = list(sampler)
                assert len(indices) == len(sampler)
                line = "%d %d %d %d %d : %s" % (n, replicas, int(drop_last), rank, len(sampler),
                                                 " ".join(map(str, indices)))
                lines.append(line.rstrip())
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distributed_sampler.txt")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

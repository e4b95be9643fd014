"""The safetensors reader the ports' PyTorch twins share (examples/*/twin.py): Debian's
python3-torch comes without the safetensors package, and the format is small enough to read
directly."""
import json
import struct

import torch

DTYPES = {"F32": torch.float32, "I64": torch.int64, "U8": torch.uint8}


def read_safetensors(path):
    """The tensors and the metadata of a safetensors file: a little-endian u64 header length,
    a JSON header, then the tensors' raw little-endian bytes."""
    with open(path, "rb") as f:
        data = f.read()
    (header_length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_length])
    body = data[8 + header_length :]
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        flat = torch.frombuffer(bytearray(body[begin:end]), dtype=DTYPES[entry["dtype"]])
        tensors[name] = flat.reshape(entry["shape"]).clone()
    return tensors, metadata

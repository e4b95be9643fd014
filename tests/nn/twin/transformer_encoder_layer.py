"""PyTorch twin of the TransformerEncoderLayer test (tests/nn/transformer_encoder_layer_test.cpp):
prints each case's layer weights, input and eval-mode output (and the input's gradient of the
output's sum) as `case NAME`, then `tensor KEY SHAPE values...` lines with 17 significant
digits. The C++ test loads the weights into halfgrad's layer and compares.

Regenerate with Debian's PyTorch:
  /usr/bin/python3 transformer_encoder_layer.py > transformer_encoder_layer.txt
"""
import torch


def emit(key, t):
    shape = ",".join(str(s) for s in t.shape) or "scalar"
    values = " ".join("%.17g" % v for v in t.detach().double().flatten().tolist())
    print("tensor", key, shape, values)


def case(name, batch_first, norm_first, activation, shape):
    torch.manual_seed(1234)
    layer = torch.nn.TransformerEncoderLayer(
        d_model=8, nhead=2, dim_feedforward=16, dropout=0.1, activation=activation,
        batch_first=batch_first, norm_first=norm_first, dtype=torch.float64)
    layer.eval()
    # Non-trivial norms: the defaults (ones, zeros) would hide a swapped weight and bias.
    with torch.no_grad():
        for norm in (layer.norm1, layer.norm2):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
        layer.self_attn.in_proj_bias.uniform_(-0.2, 0.2)
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    y = layer(x)
    y.sum().backward()
    print("case", name)
    for key, value in layer.state_dict().items():
        emit(key, value)
    emit("input", x)
    emit("output", y)
    emit("input_grad", x.grad)


case("post_norm_relu", False, False, "relu", (5, 3, 8))
case("pre_norm_gelu_batch_first", True, True, "gelu", (3, 5, 8))

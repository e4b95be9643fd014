// Attention and a GPT: MultiheadAttention (torch.nn.MultiheadAttention with batch_first=true),
// TransformerEncoderLayer (torch's), Block (pre-LayerNorm attention + MLP) and GPT (token +
// position embeddings, blocks, final LayerNorm, lm_head), as in nanoGPT.
//
//   B batch, T sequence length, C = embed_dim, H heads, D = C / H head width, V vocabulary.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "halfgrad/nn/modules.h"

namespace hg::nn {

// PyTorch's parameter layout: in_proj_weight [3C, C] (q, k, v stacked; xavier_uniform),
// in_proj_bias [3C] (zeros), out_proj a Linear(C, C) whose bias starts at zero.
// forward(x) is self-attention, forward(query, key, value) attends from query to key/value;
// causal masks the future. Returns the output only (PyTorch also returns the averaged
// attention weights).
class MultiheadAttention : public CustomForward<MultiheadAttention> {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, bool causal = false, bool bias = true,
                     double dropout = 0.0);
  std::string name() const override { return "MultiheadAttention"; }
  std::string extra_repr() const override;
  // query [B, L, C], key and value [B, S, C] (both given, or neither for self-attention)
  // -> [B, L, C]
#pragma GCC diagnostic push
// NOTE [CustomForward hides Module's forward]: clang's -Woverloaded-virtual is off here.
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
  Tensor forward(const Tensor& query, const std::optional<Tensor>& key = std::nullopt,
                 const std::optional<Tensor>& value = std::nullopt);
#pragma GCC diagnostic pop

  int64_t embed_dim, num_heads;
  bool causal;
  double dropout;
  Tensor in_proj_weight, in_proj_bias;
  std::shared_ptr<Linear> out_proj;
};

// x + attn(ln_1(x)), then x + mlp(ln_2(x)); mlp = Linear(C, 4C), GELU(tanh), Linear(4C, C).
// Keys: ln_1.*, attn.in_proj_weight, attn.out_proj.*, ln_2.*, mlp.0.*, mlp.2.*.
class Block : public Module {
 public:
  Block(int64_t n_embd, int64_t n_head);
  std::string name() const override { return "Block"; }
  Tensor forward(const Tensor& x) override;  // [B, T, C] -> [B, T, C]

  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<MultiheadAttention> attn;
  std::shared_ptr<Sequential> mlp;
};

// torch.nn.TransformerEncoderLayer's options (is_causal is an option here, not a call
// argument: the attention masks the future on every call).
struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // or "gelu" (exact)
  double layer_norm_eps = 1e-5;
  bool batch_first = false;  // torch's default: src [T, B, C]
  bool norm_first = false;
  bool causal = false;
};

// Self-attention and a feed-forward block, each with a residual connection and LayerNorm, as
// torch's: norm_first computes x + sa(norm1(x)), then x + ff(norm2(x)); otherwise
// norm1(x + sa(x)), then norm2(x + ff(x)); ff(x) = linear2(dropout(activation(linear1(x)))),
// sa and ff each followed by a dropout. Keys as torch's: self_attn.in_proj_weight,
// self_attn.in_proj_bias, self_attn.out_proj.*, linear1.*, linear2.*, norm1.*, norm2.*.
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                          TransformerEncoderLayerOptions options = {});
  std::string name() const override { return "TransformerEncoderLayer"; }
  // src [T, B, C] ([B, T, C] with batch_first) -> the same shape.
  Tensor forward(const Tensor& src) override;

  TransformerEncoderLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
  std::shared_ptr<LayerNorm> norm1, norm2;
};

// idx [B, T] (int64, T <= block_size) -> logits [B, T, V].
// Keys: wte.weight, wpe.weight, h.<i>.*, ln_f.*, lm_head.weight (no bias). Weights start as
// nanoGPT's: N(0, 0.02) for Linear and Embedding weights, zero biases; lm_head is not tied to
// wte.
class GPT : public Module {
 public:
  GPT(int64_t vocab_size, int64_t block_size, int64_t n_layer, int64_t n_head, int64_t n_embd);
  std::string name() const override { return "GPT"; }
  Tensor forward(const Tensor& idx) override;

  int64_t vocab_size, block_size;
  // Gradient checkpointing of every block (hg::utils::checkpoint): while training, each block
  // keeps its input instead of its activations and runs again in backward.
  bool checkpoint_blocks = false;
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Sequential> h;
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Linear> lm_head;
};

}  // namespace hg::nn

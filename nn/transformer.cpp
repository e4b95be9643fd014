// MultiheadAttention, the GPT Block and the GPT (transformer.h).
#include "halfgrad/nn/transformer.h"

#include <typeinfo>

#include "halfgrad/autograd/checkpoint.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/nn/init.h"
#include "halfgrad/ops/ops.h"

namespace hg::nn {

// ---- MultiheadAttention ---------------------------------------------------------------------

MultiheadAttention::MultiheadAttention(int64_t embed_dim_, int64_t num_heads_, bool causal_,
                                       bool bias, double dropout_)
    : embed_dim(embed_dim_), num_heads(num_heads_), causal(causal_), dropout(dropout_) {
  HG_CHECK(num_heads > 0 && embed_dim % num_heads == 0,
           "MultiheadAttention: expected embed_dim ({}) divisible by num_heads ({})", embed_dim,
           num_heads);
  in_proj_weight = register_parameter("in_proj_weight", empty({3 * embed_dim, embed_dim}));
  init::xavier_uniform_(in_proj_weight);
  if (bias) in_proj_bias = register_parameter("in_proj_bias", zeros({3 * embed_dim}));
  out_proj = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias));
  if (bias) init::zeros_(out_proj->bias);
}

std::string MultiheadAttention::extra_repr() const {
  return fmt::format("embed_dim={}, num_heads={}, causal={}", embed_dim, num_heads,
                     causal ? "True" : "False");
}

Tensor MultiheadAttention::forward(const Tensor& query, const std::optional<Tensor>& key_given,
                                   const std::optional<Tensor>& value_given) {
  HG_CHECK(key_given.has_value() == value_given.has_value(),
           "MultiheadAttention: expected key and value both given or both left out, got only "
           "the {}",
           key_given ? "key" : "value");
  const Tensor& key = key_given ? *key_given : query;
  const Tensor& value = value_given ? *value_given : query;
  const int64_t C = embed_dim, H = num_heads, D = C / H;
  HG_CHECK(query.dim() == 3 && query.size(2) == C,
           "MultiheadAttention: expected query of shape [B, L, {}], got {}", C, query.sizes());
  HG_CHECK(key.dim() == 3 && value.dim() == 3 && key.size(2) == C && value.size(2) == C &&
               key.sizes() == value.sizes() && key.size(0) == query.size(0),
           "MultiheadAttention: expected key and value of shape [{}, S, {}], got {} and {}",
           query.size(0), C, key.sizes(), value.sizes());
  const int64_t B = query.size(0), L = query.size(1), S = key.size(1);
  const auto heads = [&](const Tensor& projected, int64_t length) {
    return projected.reshape({B, length, H, D}).transpose(1, 2);  // [B, H, len, D]
  };
  Tensor q, k, v;
  if (key.is_same(query) && value.is_same(query)) {
    // NOTE [Packed in-projection] Self-attention projects q, k and v with one product over
    // in_proj_weight, as torch's _in_projection_packed does, and cuts its [B, L, 3C] output
    // into three views with one chunk (one node: NOTE [Split is one node] in ops/index.cpp).
    // Projected one by one, each of q, k and v is a slice of the weight and of the bias, a
    // cast of each under autocast, and a product a third as wide; backward, each slice's
    // gradient is a zero-filled [3C, C] tensor summed with the others', and the input's
    // gradient the sum of three products. Cross-attention (key or value another tensor)
    // projects them one by one, as torch does.
    const std::vector<Tensor> qkv = chunk(linear(query, in_proj_weight, in_proj_bias), 3, -1);
    q = heads(qkv[0], L);
    k = heads(qkv[1], S);
    v = heads(qkv[2], S);
  } else {
    auto project = [&](const Tensor& x, int64_t which, int64_t length) {
      Tensor w = in_proj_weight.narrow(0, which * C, C);
      Tensor b = in_proj_bias.defined() ? in_proj_bias.narrow(0, which * C, C) : Tensor();
      return heads(linear(x, w, b), length);
    };
    q = project(query, 0, L);
    k = project(key, 1, S);
    v = project(value, 2, S);
  }
  Tensor y = scaled_dot_product_attention(q, k, v, Tensor(), is_training() ? dropout : 0.0,
                                          causal);  // [B, H, L, D]
  y = y.transpose(1, 2).reshape({B, L, C});         // [B, L, C]
  return (*out_proj)(y);
}

// ---- Block ----------------------------------------------------------------------------------

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                                                 TransformerEncoderLayerOptions options_)
    : options(std::move(options_)) {
  HG_CHECK(options.activation == "relu" || options.activation == "gelu",
           "TransformerEncoderLayer: expected activation \"relu\" or \"gelu\", got \"{}\"",
           options.activation);
  self_attn = register_module(
      "self_attn",
      std::make_shared<MultiheadAttention>(d_model, nhead, options.causal, true, options.dropout));
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, options.dim_feedforward));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout));
  linear2 = register_module("linear2", std::make_shared<Linear>(options.dim_feedforward, d_model));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(d_model, options.layer_norm_eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(d_model, options.layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(options.dropout));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src) {
  HG_CHECK(src.dim() == 3, "TransformerEncoderLayer: expected a 3-D input ({}), got shape {}",
           options.batch_first ? "[B, T, C]" : "[T, B, C]", src.sizes());
  // The attention takes [B, T, C].
  Tensor x = options.batch_first ? src : src.transpose(0, 1);
  const auto sa = [&](const Tensor& h) { return (*dropout1)((*self_attn)(h)); };
  const auto ff = [&](const Tensor& h) {
    const Tensor hidden = (*linear1)(h);
    const Tensor activated = options.activation == "relu" ? relu(hidden) : gelu(hidden, "none");
    return (*dropout2)((*linear2)((*dropout)(activated)));
  };
  if (options.norm_first) {
    x = x + sa((*norm1)(x));
    x = x + ff((*norm2)(x));
  } else {
    x = (*norm1)(x + sa(x));
    x = (*norm2)(x + ff(x));
  }
  return options.batch_first ? x : x.transpose(0, 1);
}

Block::Block(int64_t n_embd, int64_t n_head) {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(n_embd));
  attn = register_module("attn", std::make_shared<MultiheadAttention>(n_embd, n_head, true));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(n_embd));
  mlp =
      register_module("mlp", std::make_shared<Sequential>(Linear(n_embd, 4 * n_embd), GELU("tanh"),
                                                          Linear(4 * n_embd, n_embd)));
}

Tensor Block::forward(const Tensor& x) {
  Tensor y = x + (*attn)((*ln_1)(x));
  const Tensor h = (*ln_2)(y);
  // The MLP's Linear and GELU as one op, linear_gelu (on a GPU the GELU runs in the GEMM's
  // epilogue), while the modules stay as they are (parameters mlp.0.* and mlp.2.*). An MLP
  // rebuilt otherwise, or with forward hooks on mlp, mlp.0 or mlp.1, runs module by module.
  // Exactly Linear and GELU: a subclass may compute something else in its forward.
  if (mlp->size() == 3 && !mlp->has_forward_hooks() && typeid(*(*mlp)[0]) == typeid(Linear) &&
      typeid(*(*mlp)[1]) == typeid(GELU)) {
    const auto* fc = static_cast<const Linear*>((*mlp)[0].get());
    const auto* act = static_cast<const GELU*>((*mlp)[1].get());
    if (!fc->has_forward_hooks() && !act->has_forward_hooks()) {
      return y + (*(*mlp)[2])(linear_gelu(h, fc->weight, fc->bias, act->approximate));
    }
  }
  return y + (*mlp)(h);
}

// ---- GPT ------------------------------------------------------------------------------------

GPT::GPT(int64_t vocab_size_, int64_t block_size_, int64_t n_layer, int64_t n_head, int64_t n_embd)
    : vocab_size(vocab_size_), block_size(block_size_) {
  wte = register_module("wte", std::make_shared<Embedding>(vocab_size, n_embd));
  wpe = register_module("wpe", std::make_shared<Embedding>(block_size, n_embd));
  h = register_module("h", std::make_shared<Sequential>());
  for (int64_t i = 0; i < n_layer; ++i) h->push_back(std::make_shared<Block>(n_embd, n_head));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(n_embd));
  lm_head = register_module("lm_head", std::make_shared<Linear>(n_embd, vocab_size, false));
  // nanoGPT's _init_weights: N(0, 0.02) weights for Linear and Embedding, zero biases (the
  // attention's in_proj keeps MultiheadAttention's own init).
  apply([](Module& module) {
    if (auto* lin = dynamic_cast<Linear*>(&module)) {
      init::normal_(lin->weight, 0.0, 0.02);
      if (lin->bias.defined()) init::zeros_(lin->bias);
    } else if (auto* emb = dynamic_cast<Embedding*>(&module)) {
      init::normal_(emb->weight, 0.0, 0.02);
    }
  });
}

Tensor GPT::forward(const Tensor& idx) {
  HG_CHECK(idx.dim() == 2, "GPT: expected idx of shape [B, T], got {}", idx.sizes());
  const int64_t T = idx.size(1);
  HG_CHECK(T <= block_size, "GPT: expected a sequence of at most block_size = {}, got T = {}",
           block_size, T);
  // [T]; made on a GPU by a cumulative sum, not copied from the host, so a captured training
  // step can run it (see causal_future in ops/attention.cpp)
  const Tensor pos = idx.is_cpu()
                         ? arange(T, kInt64)
                         : cumsum(ones({T}, {.dtype = kInt64, .device = idx.device()}), 0) - 1;
  Tensor x = (*wte)(idx) + (*wpe)(pos);  // [B, T, C]
  if (checkpoint_blocks) {
    for (const auto& block : *h) {
      x = utils::checkpoint([&block](const Tensor& input) { return (*block)(input); }, x);
    }
  } else {
    x = (*h)(x);
  }
  return (*lm_head)((*ln_f)(x));  // [B, T, V]
}

}  // namespace hg::nn

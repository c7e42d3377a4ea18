// nn building blocks, part 1: the Module base (own parameters, PyTorch-style names, one call
// frame per call so errors point at the user's line) and the simple layers: Linear, Embedding,
// LayerNorm, RMSNorm and the position-wise feed-forward network.
#pragma once

#include <cstdint>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <variant>

#include "frontend/builder.h"
#include "frontend/tensor.h"

namespace kiln::frontend::nn {

// Initialisers: normal(0.02) for weights and embeddings (GPT-2/BERT), zeros for biases, ones
// for norm gains; Xavier/Glorot uniform U(-a, a), a = gain sqrt(6 / (fan_in + fan_out)), for
// weight matrices where a model asks for it (the Annotated Transformer's choice).
inline ir::ParamInit normalInit(double stddev = 0.02) {
  return {ir::ParamInit::Kind::Normal, stddev};
}
inline ir::ParamInit xavierInit(double gain = 1.0) {
  return {ir::ParamInit::Kind::XavierUniform, gain};
}
inline ir::ParamInit zerosInit() {
  return {ir::ParamInit::Kind::Zeros, 0};
}
inline ir::ParamInit onesInit() {
  return {ir::ParamInit::Kind::Ones, 0};
}

// A module owns its parameters, named `<scope>.<leaf>`, and its submodules, each in a child
// scope. Constructors pass their caller's place down to submodules and parameters (so a
// duplicate name is reported at the user's line); each call opens a frame (frame(loc)).
class Module {
public:
  const std::string &name() const { return scope_.path(); }

protected:
  explicit Module(Scope scope) : scope_(std::move(scope)) {}
  Builder &builder() const { return scope_.builder(); }
  Scope child(std::string_view leaf) const { return scope_.child(leaf); }
  Tensor param(std::string_view leaf, ir::Shape shape, ir::ParamInit init,
               const std::source_location &loc) const {
    return builder().param(scope_.qualify(leaf), std::move(shape), init, loc);
  }
  // While the returned frame lives, errors start with `loc` (if it is the outermost) and name
  // this module.
  Builder::CallFrame frame(const std::source_location &loc) const {
    return Builder::CallFrame(builder(), name(), loc);
  }

private:
  Scope scope_;
};

// y = x W^T + b:  x [..., in], W [out, in] (initialised by `init`), b [out] (zeros)
// -> y [..., out].
class Linear : public Module {
public:
  Linear(Scope scope, int64_t in, int64_t out, bool withBias = true,
         ir::ParamInit init = normalInit(),
         std::source_location loc = std::source_location::current());
  Tensor operator()(const Tensor &x,
                    std::source_location loc = std::source_location::current()) const;

  Tensor weight;
  std::optional<Tensor> bias;
};

// Row lookup: ids [...] (integer) -> [..., dim]; weight [num, dim].
class Embedding : public Module {
public:
  Embedding(Scope scope, int64_t num, int64_t dim,
            std::source_location loc = std::source_location::current());
  Tensor operator()(const Tensor &ids,
                    std::source_location loc = std::source_location::current()) const;

  Tensor weight;
};

// Ba et al. 2016, over the last dim: (x - mean) / sqrt(var + eps) * weight + bias, written in
// primitives (a later pass fuses the pattern).
class LayerNorm : public Module {
public:
  LayerNorm(Scope scope, int64_t dim, double eps = 1e-5,
            std::source_location loc = std::source_location::current());
  Tensor operator()(const Tensor &x,
                    std::source_location loc = std::source_location::current()) const;

  Tensor weight, bias;
  double eps;
};

// Zhang & Sennrich 2019: x / sqrt(mean(x^2) + eps) * weight (no centring, no bias).
class RMSNorm : public Module {
public:
  RMSNorm(Scope scope, int64_t dim, double eps = 1e-6,
          std::source_location loc = std::source_location::current());
  Tensor operator()(const Tensor &x,
                    std::source_location loc = std::source_location::current()) const;

  Tensor weight;
  double eps;
};

enum class NormKind : uint8_t { LayerNorm, RMSNorm };

// The usual eps of each kind: 1e-5 for LayerNorm (PyTorch's nn.LayerNorm), 1e-6 for RMSNorm
// (LLaMA).
constexpr double defaultNormEps(NormKind kind) {
  return kind == NormKind::RMSNorm ? 1e-6 : 1e-5;
}

// Either norm, chosen by configuration; eps nullopt = defaultNormEps(kind).
class Norm {
public:
  Norm(Scope scope, NormKind kind, int64_t dim, std::optional<double> eps = std::nullopt,
       std::source_location loc = std::source_location::current());
  Tensor operator()(const Tensor &x,
                    std::source_location loc = std::source_location::current()) const;

private:
  std::variant<LayerNorm, RMSNorm> impl_;
};

// A learned token [d] put before every sequence of x [B, T, d] -> [B, T + 1, d]: ViT's class
// token (BERT's [CLS] position), whose output summarises the sequence for a classifier.
Tensor prependToken(const Tensor &x, const Tensor &token,
                    std::source_location loc = std::source_location::current());

enum class Activation : uint8_t { Relu, Gelu, GeluTanh, Softplus, SwiGLU, GeGLU };

// Whether the feed-forward gates one projection with another (swiglu, geglu) rather than applying
// act to one.
bool isGated(Activation act);
// act(x) for the per-element activations relu, gelu (exact, erf), gelu_tanh and softplus. The
// gated ones are no function of x alone: asking for one is an error.
Tensor activate(const Tensor &x, Activation act,
                std::source_location loc = std::source_location::current());

// The position-wise feed-forward network, [..., d] -> [..., d]:
//   relu/gelu/gelu_tanh/softplus:  fc2(dropout(act(fc1(x))))               (Vaswani et al. 2017)
//   swiglu:               down_proj(silu(gate_proj(x)) * up_proj(x))        (Shazeer 2020, LLaMA)
//   geglu:                down_proj(gelu_tanh(gate_proj(x)) * up_proj(x))   (Shazeer 2020; Gemma,
//                                                                           T5 v1.1)
class FeedForward : public Module {
public:
  // `weightInit` initialises the weight matrices of the projections.
  FeedForward(Scope scope, int64_t dModel, int64_t dFF, Activation act, bool bias = true,
              double dropout = 0, ir::ParamInit weightInit = normalInit(),
              std::source_location loc = std::source_location::current());
  Tensor operator()(const Tensor &x,
                    std::source_location loc = std::source_location::current()) const;

private:
  Activation act_;
  double dropout_;
  Linear in_;                // fc1, or gate_proj when gated
  std::optional<Linear> up_; // up_proj (gated only)
  Linear out_;               // fc2, or down_proj when gated
};

} // namespace kiln::frontend::nn

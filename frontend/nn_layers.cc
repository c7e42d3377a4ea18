// Linear, Embedding, the class token, the two norms and the feed-forward network, in DSL
// primitives.
#include "frontend/nn_layers.h"

#include <cmath>

#include <fmt/format.h>

namespace kiln::frontend::nn {

Linear::Linear(Scope scope, int64_t in, int64_t out, bool withBias, ir::ParamInit init,
               std::source_location loc)
    : Module(std::move(scope)) {
  weight = param("weight", {out, in}, init, loc);
  if (withBias)
    bias = param("bias", {out}, zerosInit(), loc);
}

Tensor Linear::operator()(const Tensor &x, std::source_location loc) const {
  auto f = frame(loc);
  Tensor y = x.matmul(weight, {.transposeB = true}); // [..., in] x [out, in]^T -> [..., out]
  return bias ? y + *bias : y;
}

Tensor prependToken(const Tensor &x, const Tensor &token, std::source_location loc) {
  Builder &b = x.builder(loc);
  if (x.rank() != 3 || token.rank() != 1 || token.dim(0) != x.dim(2))
    b.fail("prependToken", loc,
           fmt::format("expected x [B, T, d] and a token [d], got {} and {}",
                       ir::typeString(x.type()), ir::typeString(token.type())));
  Builder::CallFrame f(b, "prependToken", loc);
  Tensor first = token.reshape({1, 1, token.dim(0)}).broadcastTo({x.dim(0), 1, x.dim(2)});
  return concat({first, x}, 1);
}

Embedding::Embedding(Scope scope, int64_t num, int64_t dim, std::source_location loc)
    : Module(std::move(scope)) {
  weight = param("weight", {num, dim}, normalInit(), loc);
}

Tensor Embedding::operator()(const Tensor &ids, std::source_location loc) const {
  auto f = frame(loc);
  return weight.gather(ids, 0); // [num, dim] at ids [...] -> [..., dim]
}

namespace {
// eps keeps var + eps (mean(x^2) + eps) away from 0 under the rsqrt: a negative or non-finite
// one makes NaN of a constant row, or of every row.
void checkEps(Builder &b, std::string_view what, double eps, const std::source_location &loc) {
  if (!(eps >= 0) || !std::isfinite(eps))
    b.fail(what, loc, fmt::format("eps {} must be finite and >= 0", eps));
}
} // namespace

LayerNorm::LayerNorm(Scope scope, int64_t dim, double eps, std::source_location loc)
    : Module(std::move(scope)), eps(eps) {
  checkEps(builder(), "LayerNorm", eps, loc);
  weight = param("weight", {dim}, onesInit(), loc);
  bias = param("bias", {dim}, zerosInit(), loc);
}

Tensor LayerNorm::operator()(const Tensor &x, std::source_location loc) const {
  auto f = frame(loc);
  Tensor mu = x.mean({-1}, /*keepdims=*/true);          // [..., 1]
  Tensor xc = x - mu;                                   // [..., d]
  Tensor var = (xc * xc).mean({-1}, /*keepdims=*/true); // [..., 1], biased as in PyTorch
  Tensor xhat = xc * (var + eps).rsqrt();               // [..., d]
  return xhat * weight + bias;
}

RMSNorm::RMSNorm(Scope scope, int64_t dim, double eps, std::source_location loc)
    : Module(std::move(scope)), eps(eps) {
  checkEps(builder(), "RMSNorm", eps, loc);
  weight = param("weight", {dim}, onesInit(), loc);
}

Tensor RMSNorm::operator()(const Tensor &x, std::source_location loc) const {
  auto f = frame(loc);
  Tensor ms = (x * x).mean({-1}, /*keepdims=*/true); // [..., 1]
  return x * (ms + eps).rsqrt() * weight;
}

namespace {
std::variant<LayerNorm, RMSNorm> makeNorm(Scope scope, NormKind kind, int64_t dim, double eps,
                                          const std::source_location &loc) {
  if (kind == NormKind::RMSNorm)
    return RMSNorm(std::move(scope), dim, eps, loc);
  return LayerNorm(std::move(scope), dim, eps, loc);
}
} // namespace

Norm::Norm(Scope scope, NormKind kind, int64_t dim, std::optional<double> eps,
           std::source_location loc)
    : impl_(makeNorm(std::move(scope), kind, dim, eps.value_or(defaultNormEps(kind)), loc)) {}

Tensor Norm::operator()(const Tensor &x, std::source_location loc) const {
  return std::visit([&](const auto &norm) { return norm(x, loc); }, impl_);
}

FeedForward::FeedForward(Scope scope, int64_t dModel, int64_t dFF, Activation act, bool bias,
                         double dropout, ir::ParamInit weightInit, std::source_location loc)
    : Module(std::move(scope)), act_(act), dropout_(dropout),
      in_(child(isGated(act) ? "gate_proj" : "fc1"), dModel, dFF, bias, weightInit, loc),
      up_(isGated(act)
              ? std::optional<Linear>(Linear(child("up_proj"), dModel, dFF, bias, weightInit, loc))
              : std::nullopt),
      out_(child(isGated(act) ? "down_proj" : "fc2"), dFF, dModel, bias, weightInit, loc) {}

Tensor FeedForward::operator()(const Tensor &x, std::source_location loc) const {
  auto f = frame(loc);
  Tensor h = in_(x); // [..., d_ff]
  if (isGated(act_)) {
    Tensor gate = act_ == Activation::SwiGLU ? h.silu() : h.geluTanh();
    h = gate * (*up_)(x); // Swish- or GELU-gated linear unit
  } else {
    h = activate(h, act_);
  }
  return out_(h.dropout(dropout_)); // [..., d]
}

Tensor activate(const Tensor &x, Activation act, std::source_location loc) {
  switch (act) {
  case Activation::Relu:
    return x.relu(loc);
  case Activation::Gelu:
    return x.gelu(loc);
  case Activation::GeluTanh:
    return x.geluTanh(loc);
  case Activation::Softplus:
    return x.softplus(loc);
  case Activation::SwiGLU:
  case Activation::GeGLU:
    break;
  }
  x.builder(loc).fail("activate", loc,
                      fmt::format("{} is gated, not a per-element activation",
                                  act == Activation::SwiGLU ? "swiglu" : "geglu"));
}

bool isGated(Activation act) {
  return act == Activation::SwiGLU || act == Activation::GeGLU;
}

} // namespace kiln::frontend::nn

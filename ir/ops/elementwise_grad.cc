// Gradient rules of the elementwise ops, written in IR ops (see ir/grad.h). Conventions follow
// PyTorch's derivatives.yaml where a choice exists: relu'(0) = 0, |x|'(0) = 0, ties of max/min
// split the gradient in half, d(a^b)/da = 0 where b == 0, d(a^b)/db = 0 where a == 0 and b >= 0.
#include "ir/grad.h"
#include "ir/ops/elementwise.h"

namespace kiln::ir {
using K = OpKind;

// d(-x) = -dy
Status gradNeg(GradContext &c) {
  c.setGrad(0, c.neg(c.dy[0]));
  return {};
}

// d|x| = dy sign(x), sign(0) = 0
Status gradAbs(GradContext &c) {
  ValueId x = c.x(), zero = c.k(0);
  DType t = c.type(x).dtype;
  ValueId positive = c.cast(c.emit(K::Gt, {x, zero}), t);
  ValueId negative = c.cast(c.emit(K::Lt, {x, zero}), t);
  ValueId sign = c.sub(positive, negative);
  c.setGrad(0, c.mul(c.dy[0], sign));
  return {};
}

// d e^x = dy y
Status gradExp(GradContext &c) {
  c.setGrad(0, c.mul(c.dy[0], c.y()));
  return {};
}

// d log x = dy / x
Status gradLog(GradContext &c) {
  c.setGrad(0, c.div(c.dy[0], c.x()));
  return {};
}

// d sqrt x = dy / (2 y)
Status gradSqrt(GradContext &c) {
  c.setGrad(0, c.div(c.dy[0], c.mul(c.k(2), c.y())));
  return {};
}

// y = x^(-1/2):  dy/dx = -1/2 x^(-3/2) = -1/2 y^3
Status gradRsqrt(GradContext &c) {
  ValueId y3 = c.mul(c.mul(c.y(), c.y()), c.y());
  c.setGrad(0, c.mul(c.dy[0], c.mul(c.k(-0.5), y3)));
  return {};
}

// d tanh x = dy (1 - y^2)
Status gradTanh(GradContext &c) {
  ValueId one = c.k(1);
  ValueId y2 = c.mul(c.y(), c.y());
  c.setGrad(0, c.mul(c.dy[0], c.sub(one, y2)));
  return {};
}

// d sigmoid x = dy y (1 - y)
Status gradSigmoid(GradContext &c) {
  c.setGrad(0, c.mul(c.dy[0], c.mul(c.y(), c.sub(c.k(1), c.y()))));
  return {};
}

// d relu x = dy where x > 0, else 0
Status gradRelu(GradContext &c) {
  ValueId zero = c.k(0);
  c.setGrad(0, c.select(c.emit(K::Gt, {c.x(), zero}), c.dy[0], zero));
  return {};
}

// d gelu = dy gelu_grad(x)  (= dy (Phi(x) + x phi(x)), elementwise.h)
Status gradGelu(GradContext &c) {
  c.setGrad(0, c.mul(c.dy[0], c.emit(K::GeluGrad, {c.x()})));
  return {};
}

// d gelu_grad = dy phi(x) (2 - x^2):  (Phi + x phi)' = phi + phi + x (-x phi)
Status gradGeluGrad(GradContext &c) {
  ValueId x = c.x(), x2 = c.mul(x, x);
  ValueId pdf = c.mul(c.k(0.39894228040143267794), c.emit(K::Exp, {c.mul(c.k(-0.5), x2)}));
  c.setGrad(0, c.mul(c.dy[0], c.mul(pdf, c.sub(c.k(2), x2))));
  return {};
}

// d gelu_tanh = dy gelu_tanh_grad(x)  (elementwise.h)
Status gradGeluTanh(GradContext &c) {
  c.setGrad(0, c.mul(c.dy[0], c.emit(K::GeluTanhGrad, {c.x()})));
  return {};
}

// d gelu_tanh_grad = dy (1 - t^2) (u' - x t u'^2 + 3 a s x^2), with t, u' as in elementwise.h:
// the derivative of (1 + t)/2 + x/2 (1 - t^2) u', where t' = (1 - t^2) u' and u'' = 6 a s x.
Status gradGeluTanhGrad(GradContext &c) {
  ValueId x = c.x(), x2 = c.mul(x, x);
  ValueId s = c.k(0.79788456080286535588), a = c.k(0.044715);
  ValueId t = c.emit(K::Tanh, {c.mul(s, c.add(x, c.mul(a, c.mul(x2, x))))});
  ValueId du = c.mul(s, c.add(c.k(1), c.mul(c.k(3 * 0.044715), x2)));
  ValueId inner = c.add(c.sub(du, c.mul(c.mul(x, t), c.mul(du, du))),
                        c.mul(c.k(3 * 0.044715 * 0.79788456080286535588), x2));
  c.setGrad(0, c.mul(c.dy[0], c.mul(c.sub(c.k(1), c.mul(t, t)), inner)));
  return {};
}

// d silu = dy silu_grad(x)  (= dy s (1 + x (1 - s)), s = sigmoid(x), elementwise.h)
Status gradSilu(GradContext &c) {
  c.setGrad(0, c.mul(c.dy[0], c.emit(K::SiluGrad, {c.x()})));
  return {};
}

// d softplus = dy sigmoid(x), dy above the threshold (softplus is x there), as PyTorch's
// softplus_backward
Status gradSoftplus(GradContext &c) {
  // One node per statement: the order of a call's arguments is the compiler's, the graph's not.
  ValueId x = c.x(), above = c.emit(K::Gt, {x, c.k(20)});
  ValueId one = c.k(1), sigmoid = c.emit(K::Sigmoid, {x});
  c.setGrad(0, c.mul(c.dy[0], c.select(above, one, sigmoid)));
  return {};
}

// d silu_grad = dy s (1 - s) (2 + x (1 - 2 s)):  s' = s (1 - s), so (s + x s (1 - s))' =
// s' + s (1 - s) + x s' (1 - 2 s)
Status gradSiluGrad(GradContext &c) {
  ValueId x = c.x(), s = c.emit(K::Sigmoid, {x});
  ValueId ds = c.mul(s, c.sub(c.k(1), s));
  ValueId inner = c.add(c.k(2), c.mul(x, c.sub(c.k(1), c.mul(c.k(2), s))));
  c.setGrad(0, c.mul(c.dy[0], c.mul(ds, inner)));
  return {};
}

// d sin x = dy cos x
Status gradSin(GradContext &c) {
  c.setGrad(0, c.mul(c.dy[0], c.emit(K::Cos, {c.x()})));
  return {};
}

// d cos x = -dy sin x
Status gradCos(GradContext &c) {
  c.setGrad(0, c.neg(c.mul(c.dy[0], c.emit(K::Sin, {c.x()}))));
  return {};
}

// d erf x = dy 2/sqrt(pi) e^(-x^2)
Status gradErf(GradContext &c) {
  ValueId e = c.emit(K::Exp, {c.neg(c.mul(c.x(), c.x()))});
  c.setGrad(0, c.mul(c.dy[0], c.mul(c.k(1.12837916709551257390), e)));
  return {};
}

// Binary rules: the gradient of each operand is computed at the broadcast result shape, and
// setGrad sums it back to the operand's own shape.

Status gradAdd(GradContext &c) {
  c.setGrad(0, c.dy[0]);
  c.setGrad(1, c.dy[0]);
  return {};
}

Status gradSub(GradContext &c) {
  c.setGrad(0, c.dy[0]);
  c.setGrad(1, c.neg(c.dy[0]));
  return {};
}

Status gradMul(GradContext &c) {
  c.setGrad(0, c.mul(c.dy[0], c.x(1)));
  c.setGrad(1, c.mul(c.dy[0], c.x(0)));
  return {};
}

// y = a / b:  da = dy / b,  db = -dy a / b^2 = -da y
Status gradDiv(GradContext &c) {
  ValueId da = c.div(c.dy[0], c.x(1));
  c.setGrad(0, da);
  c.setGrad(1, c.neg(c.mul(da, c.y())));
  return {};
}

namespace {
// max/min: the chosen operand gets dy; on a tie each gets dy/2 (as PyTorch).
// `wins` is the comparison that picks a over b (gt for max, lt for min).
Status gradMaxMin(GradContext &c, OpKind wins) {
  ValueId a = c.x(0), b = c.x(1), dy = c.dy[0];
  ValueId half = c.mul(dy, c.k(0.5)), zero = c.k(0);
  ValueId tie = c.emit(K::Eq, {a, b});
  ValueId aWins = c.emit(wins, {a, b}), bWins = c.emit(wins, {b, a});
  c.setGrad(0, c.select(tie, half, c.select(aWins, dy, zero)));
  c.setGrad(1, c.select(tie, half, c.select(bWins, dy, zero)));
  return {};
}
} // namespace

Status gradMax(GradContext &c) {
  return gradMaxMin(c, K::Gt);
}
Status gradMin(GradContext &c) {
  return gradMaxMin(c, K::Lt);
}

// y = a^b:  da = dy b a^(b-1), taken as 0 where b == 0 (else 0 * 0^-1 = NaN at a == 0);
//           db = dy y log a, taken as 0 where a == 0 and b >= 0 (the limit of y log a there).
Status gradPow(GradContext &c) {
  ValueId a = c.x(0), b = c.x(1), dy = c.dy[0], zero = c.k(0);
  ValueId da = c.mul(dy, c.mul(b, c.emit(K::Pow, {a, c.sub(b, c.k(1))})));
  c.setGrad(0, c.select(c.emit(K::Eq, {b, zero}), zero, da));
  ValueId atZero = c.emit(K::LogicalAnd, {c.emit(K::Eq, {a, zero}), c.emit(K::Ge, {b, zero})});
  ValueId safeA = c.select(atZero, c.k(1), a); // keeps log finite where the result is masked
  c.setGrad(1, c.select(atZero, zero, c.mul(dy, c.mul(c.y(), c.emit(K::Log, {safeA})))));
  return {};
}

// select(p, a, b): a gets dy where p, b gets dy where not p; p (bool) gets nothing.
Status gradSelect(GradContext &c) {
  ValueId p = c.x(0), zero = c.k(0);
  c.setGrad(1, c.select(p, c.dy[0], zero));
  c.setGrad(2, c.select(p, zero, c.dy[0]));
  return {};
}

// cast between float dtypes: the gradient is cast back; to or from integers or bool: none (the
// result is piecewise constant in x, or x is not a float).
Status gradCast(GradContext &c) {
  DType from = c.type(c.x()).dtype;
  if (isFloat(from) && isFloat(c.type(c.y()).dtype))
    c.dx[0] = c.cast(c.dy[0], from);
  return {};
}

// dropout is x * m / (1-p) with a mask m that is a pure function of (seed, step, element index),
// the same for any input of that shape; so its gradient is the same dropout (the same step) of
// dy. The step is a count: no gradient.
Status gradDropout(GradContext &c) {
  double p = c.attrs().getFloat("p");
  int64_t seed = c.attrs().getInt("seed");
  c.dx[0] = c.forward.operands.size() == 2
                ? c.emit(K::Dropout, {c.dy[0], c.x(1)}, {{"p", p}, {"seed", seed}})
                : c.emit(K::Dropout, {c.dy[0]}, {{"p", p}, {"seed", seed}});
  return {};
}

} // namespace kiln::ir

// Inference of the fused ops, which is also their verifier: the result types (optional operands
// and results, GQA shapes, statistics in the stat dtype) and every check with its exact message.
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/ir/ops_test_util.h"
#include "tests/util/ir_types.h"

namespace kiln::ir::fused_infer_test {
namespace {

// (Not in optest, whose f32 is an operand: here f32 is the dtype of ir_types.h.)
using optest::inferError;
using optest::makeAttrs;

// The inferred result types, or the error as the only element.
std::vector<std::string> inferred(OpKind k, std::vector<Type> operands,
                                  const std::vector<AttrInit> &attrs) {
  Expected<Attrs> a = makeAttrs(k, attrs);
  if (!a)
    return {"attrs: " + a.error().message};
  Expected<std::vector<Type>> r = inferTypes(k, operands, *a);
  if (!r)
    return {r.error().message};
  std::vector<std::string> s;
  for (const Type &t : *r)
    s.push_back(typeString(t));
  return s;
}

// The running attention: B = 2, Hq = 4, Hkv = 2, Tq = 3, Tk = 5, D = 8, Dv = 6.
const Type kQ = T(f32, {2, 4, 3, 8}), kK = T(f32, {2, 2, 5, 8}), kV = T(f32, {2, 2, 5, 6});
std::vector<AttrInit> attn(std::vector<AttrInit> more = {}) {
  std::vector<AttrInit> a = {{"scale", 0.125}, {"q_heads", int64_t{4}}, {"kv_heads", int64_t{2}}};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}
const std::vector<AttrInit> kMask = attn({{"has_mask", true}}), kBias = attn({{"has_bias", true}});

using Strings = std::vector<std::string>;

TEST(FusedInfer, AttentionTypes) {
  EXPECT_EQ(inferred(OpKind::Attention, {kQ, kK, kV}, attn()),
            (Strings{"f32[2,4,3,6]", "f32[2,4,3]"}));
  // A padding mask [B, 1, 1, Tk] and a bias [Tq, Tk], each alone and both (mask first).
  EXPECT_EQ(inferred(OpKind::Attention, {kQ, kK, kV, T(b1, {2, 1, 1, 5})}, kMask),
            (Strings{"f32[2,4,3,6]", "f32[2,4,3]"}));
  EXPECT_EQ(inferred(OpKind::Attention, {kQ, kK, kV, T(f32, {3, 5})}, kBias),
            (Strings{"f32[2,4,3,6]", "f32[2,4,3]"}));
  EXPECT_EQ(inferred(OpKind::Attention, {kQ, kK, kV, T(b1, {}), T(f32, {1, 4, 3, 5})},
                     attn({{"has_mask", true}, {"has_bias", true}})),
            (Strings{"f32[2,4,3,6]", "f32[2,4,3]"}));
  // lse in the stat dtype: f32 for bf16, f64 for f64.
  EXPECT_EQ(inferred(OpKind::Attention,
                     {T(bf16, {1, 2, 3, 4}), T(bf16, {1, 1, 3, 4}), T(bf16, {1, 1, 3, 4})},
                     {{"scale", 0.5}, {"q_heads", int64_t{2}}, {"kv_heads", int64_t{1}}}),
            (Strings{"bf16[1,2,3,4]", "f32[1,2,3]"}));
  EXPECT_EQ(inferred(OpKind::Attention,
                     {T(f64, {1, 1, 3, 4}), T(f64, {1, 1, 0, 4}), T(f64, {1, 1, 0, 2})},
                     {{"scale", 0.5}, {"q_heads", int64_t{1}}, {"kv_heads", int64_t{1}}}),
            (Strings{"f64[1,1,3,2]", "f64[1,1,3]"}));
}

// bthd: the same attention with q, k, v and out [B, T, H, D]; lse and the mask stay [B, H, ...].
const Type kQt = T(f32, {2, 3, 4, 8}), kKt = T(f32, {2, 5, 2, 8}), kVt = T(f32, {2, 5, 2, 6});

TEST(FusedInfer, AttentionTypesBthd) {
  EXPECT_EQ(inferred(OpKind::Attention, {kQt, kKt, kVt, T(b1, {2, 1, 1, 5})},
                     attn({{"has_mask", true}, {"bthd", true}})),
            (Strings{"f32[2,3,4,6]", "f32[2,4,3]"}));
  Type out = T(f32, {2, 3, 4, 6}), lse = T(f32, {2, 4, 3});
  EXPECT_EQ(
      inferred(OpKind::AttentionBackward, {kQt, kKt, kVt, out, lse, out}, attn({{"bthd", true}})),
      (Strings{"f32[2,3,4,8]", "f32[2,5,2,8]", "f32[2,5,2,6]"}));
}

TEST(FusedInfer, AttentionBackwardTypes) {
  Type out = T(f32, {2, 4, 3, 6}), lse = T(f32, {2, 4, 3});
  EXPECT_EQ(inferred(OpKind::AttentionBackward, {kQ, kK, kV, out, lse, out}, attn()),
            (Strings{"f32[2,4,3,8]", "f32[2,2,5,8]", "f32[2,2,5,6]"}));
  // dbias has bias's (broadcast) shape; the mask gets no result.
  EXPECT_EQ(inferred(OpKind::AttentionBackward,
                     {kQ, kK, kV, out, lse, out, T(b1, {3, 5}), T(f32, {1, 1, 3, 5})},
                     attn({{"has_mask", true}, {"has_bias", true}})),
            (Strings{"f32[2,4,3,8]", "f32[2,2,5,8]", "f32[2,2,5,6]", "f32[1,1,3,5]"}));
}

TEST(FusedInfer, NormTypes) {
  Type x = T(bf16, {2, 3, 8}), w = T(bf16, {8});
  EXPECT_EQ(inferred(OpKind::LayerNorm, {x, w, w}, {}),
            (Strings{"bf16[2,3,8]", "f32[2,3]", "f32[2,3]"}));
  EXPECT_EQ(inferred(OpKind::LayerNorm, {x, w}, {{"has_weight", false}}),
            (Strings{"bf16[2,3,8]", "f32[2,3]", "f32[2,3]"}));
  EXPECT_EQ(inferred(OpKind::RmsNorm, {T(f64, {5})}, {{"has_weight", false}}),
            (Strings{"f64[5]", "f64[]"}));
  EXPECT_EQ(inferred(OpKind::AddLayerNorm, {T(f32, {2, 1, 8}), T(f32, {3, 8})},
                     {{"has_weight", false}, {"has_bias", false}}),
            (Strings{"f32[2,3,8]", "f32[2,3,8]", "f32[2,3]", "f32[2,3]"}));
  EXPECT_EQ(inferred(OpKind::AddRmsNorm, {T(f32, {2, 8}), T(f32, {2, 8}), T(f32, {8})}, {}),
            (Strings{"f32[2,8]", "f32[2,8]", "f32[2]"}));
  EXPECT_EQ(inferred(OpKind::LayerNormBackward,
                     {T(f32, {4, 8}), T(f32, {4}), T(f32, {4}), T(f32, {4, 8}), T(f32, {8})}, {}),
            (Strings{"f32[4,8]", "f32[8]"}));
  EXPECT_EQ(inferred(OpKind::RmsNormBackward, {T(bf16, {4, 8}), T(f32, {4}), T(bf16, {4, 8})},
                     {{"has_weight", false}}),
            (Strings{"bf16[4,8]"}));
}

struct ErrorCase {
  std::string name;
  OpKind op;
  std::vector<Type> operands;
  std::vector<AttrInit> attrs;
  std::string message;
};

void PrintTo(const ErrorCase &c, std::ostream *os) {
  *os << c.name;
}

std::vector<ErrorCase> errorCases() {
  const double inf = std::numeric_limits<double>::infinity();
  Type out = T(f32, {2, 4, 3, 6}), lse = T(f32, {2, 4, 3});
  Type x = T(f32, {4, 8}), w = T(f32, {8}), stat = T(f32, {4});
  const OpKind A = OpKind::Attention, AB = OpKind::AttentionBackward, LN = OpKind::LayerNorm,
               RN = OpKind::RmsNorm, LNB = OpKind::LayerNormBackward, RNB = OpKind::RmsNormBackward,
               ALN = OpKind::AddLayerNorm, ARN = OpKind::AddRmsNorm;
  return {
      // attention: operand count against the flags (the op's own 3..5 check comes first)
      {"count_mask_missing",
       A,
       {kQ, kK, kV},
       kMask,
       "expects 4 operands (q, k, v, mask) with has_mask = true, has_bias = false, has_step = "
       "false; got 3"},
      {"count_extra",
       A,
       {kQ, kK, kV, T(f32, {3, 5})},
       attn(),
       "expects 3 operands (q, k, v) with has_mask = false, has_bias = false, has_step = false; "
       "got 4"},
      {"count_arity", A, {kQ, kK}, attn(), "expects 3 to 6 operands, got 2"},
      // q, k, v
      {"q_int",
       A,
       {T(i32, {2, 4, 3, 8}), kK, kV},
       attn(),
       "q has dtype i32, expected a float dtype (f32, f64, bf16)"},
      {"k_rank",
       A,
       {kQ, T(f32, {2, 5, 8}), kV},
       attn(),
       "k is f32[2,5,8], expected rank 4 [B, H, T, D]"},
      {"dtypes_differ",
       A,
       {kQ, T(f64, {2, 2, 5, 8}), kV},
       attn(),
       "q, k and v must have one dtype, got f32[2,4,3,8], f64[2,2,5,8], f32[2,2,5,6]"},
      {"batch",
       A,
       {kQ, T(f32, {1, 2, 5, 8}), kV},
       attn(),
       "batch sizes differ: q f32[2,4,3,8], k f32[1,2,5,8], v f32[2,2,5,6]"},
      {"head_dim",
       A,
       {kQ, T(f32, {2, 2, 5, 4}), kV},
       attn(),
       "k's head dim 4 differs from q's 8 (q f32[2,4,3,8], k f32[2,2,5,4])"},
      {"v_length",
       A,
       {kQ, kK, T(f32, {2, 2, 4, 6})},
       attn(),
       "v f32[2,2,4,6] must have k's heads and length [2, 5] (k f32[2,2,5,8])"},
      {"v_heads",
       A,
       {kQ, kK, T(f32, {2, 1, 5, 6})},
       attn(),
       "v f32[2,1,5,6] must have k's heads and length [2, 5] (k f32[2,2,5,8])"},
      {"v_length_bthd",
       A,
       {kQt, kKt, T(f32, {2, 4, 2, 6})},
       attn({{"bthd", true}}),
       "v f32[2,4,2,6] must have k's length and heads [5, 2] (k f32[2,5,2,8])"},
      {"q_rank_bthd",
       A,
       {T(f32, {2, 3, 32}), kKt, kVt},
       attn({{"bthd", true}}),
       "q is f32[2,3,32], expected rank 4 [B, T, H, D] (bthd)"},
      {"bwd_out_bthd",
       AB,
       {kQt, kKt, kVt, T(f32, {2, 4, 3, 6}), lse, T(f32, {2, 3, 4, 6})},
       attn({{"bthd", true}}),
       "out is f32[2,4,3,6], expected f32[2,3,4,6] (attention's out: [B, Tq, Hq, Dv])"},
      {"heads_not_multiple",
       A,
       {kQ, T(f32, {2, 3, 5, 8}), T(f32, {2, 3, 5, 6})},
       attn({{"kv_heads", int64_t{3}}}),
       "q's 4 heads are not a multiple of k's 3 (each kv head serves Hq / Hkv query heads)"},
      {"zero_kv_heads",
       A,
       {kQ, T(f32, {2, 0, 5, 8}), T(f32, {2, 0, 5, 6})},
       attn({{"kv_heads", int64_t{0}}}),
       "q's 4 heads are not a multiple of k's 0 (each kv head serves Hq / Hkv query heads)"},
      {"q_heads_attr",
       A,
       {kQ, kK, kV},
       attn({{"q_heads", int64_t{8}}}),
       "q_heads = 8 but q has 4 heads (f32[2,4,3,8])"},
      {"kv_heads_attr",
       A,
       {kQ, kK, kV},
       attn({{"kv_heads", int64_t{1}}}),
       "kv_heads = 1 but k and v have 2 heads (f32[2,2,5,8])"},
      {"scale_inf", A, {kQ, kK, kV}, attn({{"scale", inf}}), "scale = inf is not finite"},
      {"dropout_one", A, {kQ, kK, kV}, attn({{"dropout", 1.0}}), "dropout = 1.0 is outside [0, 1)"},
      {"dropout_negative",
       A,
       {kQ, kK, kV},
       attn({{"dropout", -0.1}}),
       "dropout = -0.1 is outside [0, 1)"},
      // mask and bias
      {"mask_float",
       A,
       {kQ, kK, kV, T(f32, {3, 5})},
       kMask,
       "mask has dtype f32, expected bool (true = may attend)"},
      {"mask_shape",
       A,
       {kQ, kK, kV, T(b1, {4, 5})},
       kMask,
       "mask bool[4,5] does not broadcast to [B, Hq, Tq, Tk] = [2,4,3,5]"},
      {"mask_rank5",
       A,
       {kQ, kK, kV, T(b1, {1, 1, 1, 3, 5})},
       kMask,
       "mask bool[1,1,1,3,5] does not broadcast to [B, Hq, Tq, Tk] = [2,4,3,5]"},
      {"bias_dtype",
       A,
       {kQ, kK, kV, T(f64, {3, 5})},
       kBias,
       "bias has dtype f64, expected q's dtype f32"},
      {"bias_kv_heads",
       A,
       {kQ, kK, kV, T(f32, {1, 2, 3, 5})},
       kBias,
       "bias f32[1,2,3,5] does not broadcast to [B, Hq, Tq, Tk] = [2,4,3,5]"},
      {"bias_after_mask",
       A,
       {kQ, kK, kV, T(b1, {3, 5}), T(b1, {3, 5})},
       attn({{"has_mask", true}, {"has_bias", true}}),
       "bias has dtype bool, expected q's dtype f32"},
      // attention_backward: the saved tensors and dout
      {"bwd_count",
       AB,
       {kQ, kK, kV, out, lse, out},
       kBias,
       "expects 7 operands (q, k, v, out, lse, dout, bias) with has_mask = false, "
       "has_bias = true, has_step = false; got 6"},
      {"bwd_out",
       AB,
       {kQ, kK, kV, T(f32, {2, 4, 3, 8}), lse, out},
       attn(),
       "out is f32[2,4,3,8], expected f32[2,4,3,6] (attention's out: [B, Hq, Tq, Dv])"},
      {"bwd_lse_dtype",
       AB,
       {T(f64, {2, 4, 3, 8}), T(f64, {2, 2, 5, 8}), T(f64, {2, 2, 5, 6}), T(f64, {2, 4, 3, 6}), lse,
        T(f64, {2, 4, 3, 6})},
       attn(),
       "lse is f32[2,4,3], expected f64[2,4,3] ([B, Hq, Tq] in the stat dtype)"},
      {"bwd_dout",
       AB,
       {kQ, kK, kV, out, lse, T(f32, {2, 4, 3, 5})},
       attn(),
       "dout is f32[2,4,3,5], expected f32[2,4,3,6] (out's type)"},
      {"bwd_q_heads",
       AB,
       {kQ, kK, kV, out, lse, out},
       attn({{"q_heads", int64_t{2}}}),
       "q_heads = 2 but q has 4 heads (f32[2,4,3,8])"},
      // norms
      {"ln_count",
       LN,
       {x},
       {},
       "expects 3 operands (x, weight, bias) with has_weight = true, has_bias = true; got 1"},
      {"rn_count",
       RN,
       {x, w},
       {{"has_weight", false}},
       "expects 1 operand (x) with has_weight = false; got 2"},
      {"ln_scalar",
       LN,
       {T(f32, {})},
       {{"has_weight", false}, {"has_bias", false}},
       "x is f32[], expected rank >= 1 (the last axis is normalised)"},
      {"ln_int",
       LN,
       {T(i32, {4, 8}), w, w},
       {},
       "x has dtype i32, expected a float dtype (f32, f64, bf16)"},
      {"ln_weight_shape",
       LN,
       {x, T(f32, {4}), w},
       {},
       "weight is f32[4], expected f32[8] ([N] in x's dtype)"},
      {"ln_bias_dtype",
       LN,
       {x, w, T(f64, {8})},
       {},
       "bias is f64[8], expected f32[8] ([N] in x's dtype)"},
      {"ln_bias_alone",
       LN,
       {x, T(f32, {1, 8})},
       {{"has_weight", false}},
       "bias is f32[1,8], expected f32[8] ([N] in x's dtype)"},
      {"ln_eps", LN, {x, w, w}, {{"eps", -1.0}}, "eps = -1.0 must be finite and >= 0"},
      {"rn_eps_nan", RN, {x, w}, {{"eps", std::nan("")}}, "eps = nan must be finite and >= 0"},
      {"rn_weight",
       RN,
       {x, T(bf16, {8})},
       {},
       "weight is bf16[8], expected f32[8] ([N] in x's dtype)"},
      // norm backward ops
      {"lnb_mean",
       LNB,
       {x, T(f32, {4, 1}), stat, x, w},
       {},
       "mean is f32[4,1], expected f32[4] (x.shape[:-1] in the stat dtype)"},
      {"lnb_rstd_bf16",
       LNB,
       {T(bf16, {4, 8}), stat, T(bf16, {4}), T(bf16, {4, 8})},
       {{"has_weight", false}},
       "rstd is bf16[4], expected f32[4] (x.shape[:-1] in the stat dtype)"},
      {"lnb_dy",
       LNB,
       {x, stat, stat, T(f32, {4, 7}), w},
       {},
       "dy is f32[4,7], expected f32[4,8] (x's type)"},
      {"lnb_weight",
       LNB,
       {x, stat, stat, x, T(f32, {4})},
       {},
       "weight is f32[4], expected f32[8] ([N] in x's dtype)"},
      {"rnb_count",
       RNB,
       {x, stat, x},
       {},
       "expects 4 operands (x, rstd, dy, weight) with has_weight = true; got 3"},
      {"rnb_rstd",
       RNB,
       {x, T(f64, {4}), x},
       {{"has_weight", false}},
       "rstd is f64[4], expected f32[4] (x.shape[:-1] in the stat dtype)"},
      // the fused residual adds
      {"aln_dtypes",
       ALN,
       {x, T(f64, {4, 8}), w, w},
       {},
       "a and b must have one dtype, got f32[4,8] and f64[4,8]"},
      {"aln_int",
       ALN,
       {T(i32, {4, 8}), T(i32, {4, 8}), w, w},
       {},
       "a has dtype i32, expected a float dtype (f32, f64, bf16)"},
      {"aln_broadcast",
       ALN,
       {x, T(f32, {3, 8}), w, w},
       {},
       "a + b: shapes [4,8] and [3,8] do not broadcast (dimension 2 from the right: 4 vs 3)"},
      {"aln_scalar",
       ALN,
       {T(f32, {}), T(f32, {})},
       {{"has_weight", false}, {"has_bias", false}},
       "a + b is f32[], expected rank >= 1 (the last axis is normalised)"},
      {"aln_count",
       ALN,
       {x, x, w},
       {},
       "expects 4 operands (a, b, weight, bias) with has_weight = true, has_bias = true; got 3"},
      {"arn_weight",
       ARN,
       {T(f32, {4, 1}), T(f32, {1, 8}), T(f32, {1})},
       {},
       "weight is f32[1], expected f32[8] ([N] in sum's dtype)"},
      {"arn_eps", ARN, {x, x, w}, {{"eps", inf}}, "eps = inf must be finite and >= 0"},
  };
}

class FusedInferError : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(FusedInferError, Message) {
  const ErrorCase &c = GetParam();
  EXPECT_EQ(inferError(c.op, c.operands, c.attrs), c.message);
}

INSTANTIATE_TEST_SUITE_P(FusedInfer, FusedInferError, ::testing::ValuesIn(errorCases()),
                         [](const auto &info) { return info.param.name; });

} // namespace
} // namespace kiln::ir::fused_infer_test

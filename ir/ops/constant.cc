// Shape/dtype inference and reference loops of the ops made from attributes alone: constant,
// iota and tri. Their inference checks that the attributes describe a value the dtype can hold.
#include "ir/ops/constant.h"

#include <limits>

#include "ir/attrs.h"

namespace kiln::ir {
namespace {

// Writes v to element k of y, whatever the storage.
template <class F> void setElement(RefTensor<F> &y, int64_t k, double v) {
  if (y.isFloatStorage())
    y.f[k] = static_cast<F>(v);
  else
    y.i[k] = static_cast<int64_t>(v);
}

} // namespace

Expected<std::vector<Type>> inferConstant(std::span<const Type>, const Attrs &attrs) {
  const Shape &shape = attrs.getInts("shape");
  if (Status s = checkShapeDims(shape); !s)
    return s.error();
  DType t = attrs.getDType("dtype");
  if (Status s = checkValueFits(attrs.getFloat("value"), t); !s)
    return s.error();
  return std::vector<Type>{Type{t, shape}};
}

Expected<std::vector<Type>> inferIota(std::span<const Type>, const Attrs &attrs) {
  const Shape &shape = attrs.getInts("shape");
  if (Status s = checkShapeDims(shape); !s)
    return s.error();
  DType t = attrs.getDType("dtype");
  if (t == DType::Bool)
    return makeError("dtype bool is not allowed, expected an integer or float dtype");
  Expected<int64_t> axis = normalizeAxis(attrs.getInt("axis"), static_cast<int64_t>(shape.size()));
  if (!axis)
    return makeError("{} (shape {})", axis.error().message, shapeString(shape));
  if (t == DType::I32 && shape[*axis] - 1 > std::numeric_limits<int32_t>::max())
    return makeError("shape {}: index {} along axis {} does not fit in {}", shapeString(shape),
                     shape[*axis] - 1, *axis, dtypeName(t));
  return std::vector<Type>{Type{t, shape}};
}

Expected<std::vector<Type>> inferTri(std::span<const Type>, const Attrs &attrs) {
  const Shape &shape = attrs.getInts("shape");
  if (Status s = checkShapeDims(shape); !s)
    return s.error();
  if (shape.size() < 2)
    return makeError("shape {} has rank {}, expected rank >= 2 (rows and columns last)",
                     shapeString(shape), shape.size());
  return std::vector<Type>{Type{attrs.getDType("dtype"), shape}};
}

template <class F> KILN_REF_FN(refConstant) {
  (void)in;
  double v = attrs.getFloat("value");
  for (int64_t k = 0; k < out[0].size(); ++k)
    setElement(out[0], k, v);
  return {};
}
KILN_REF_INSTANTIATE(refConstant);

template <class F> KILN_REF_FN(refIota) {
  (void)in;
  RefTensor<F> &y = out[0];
  int64_t axis = *normalizeAxis(attrs.getInt("axis"), y.type.rank());
  int64_t k = 0;
  forEachIndex(y.type.shape,
               [&](std::span<const int64_t> idx) { setElement(y, k++, double(idx[axis])); });
  return {};
}
KILN_REF_INSTANTIATE(refIota);

// Over the last two dims (r, c): lower keeps c - r <= diagonal, upper keeps c - r >= diagonal.
template <class F> KILN_REF_FN(refTri) {
  (void)in;
  RefTensor<F> &y = out[0];
  int64_t diagonal = attrs.getInt("diagonal");
  bool lower = attrs.getBool("lower");
  size_t rank = y.type.shape.size();
  int64_t k = 0;
  forEachIndex(y.type.shape, [&](std::span<const int64_t> idx) {
    int64_t offset = idx[rank - 1] - idx[rank - 2]; // c - r
    setElement(y, k++, (lower ? offset <= diagonal : offset >= diagonal) ? 1.0 : 0.0);
  });
  return {};
}
KILN_REF_INSTANTIATE(refTri);

} // namespace kiln::ir

#include "server/models/rotary.h"

#include <ATen/ATen.h>

namespace ropeserve {

std::pair<at::Tensor, at::Tensor> RotaryTable(const at::Tensor& inv_freq, const at::Tensor& positions, double factor,
                                              RotaryLayout layout, at::ScalarType angle_dtype, at::ScalarType dtype) {
  TORCH_CHECK(inv_freq.dim() == 1 && positions.dim() == 1, "RotaryTable: inv_freq [F] and positions [T]");
  const at::Tensor angles = at::outer(positions.to(angle_dtype), inv_freq.to(angle_dtype)).to(at::kFloat);  // [T, F]
  at::Tensor cos = angles.cos(), sin = angles.sin();
  if (factor != 1.0) {
    cos = cos * factor;
    sin = sin * factor;
  }
  const std::int64_t T = angles.size(0), F = angles.size(1);
  if (layout == RotaryLayout::kRotateHalf) {
    cos = at::cat({cos, cos}, -1);
    sin = at::cat({sin, sin}, -1);
  } else {
    cos = at::stack({cos, cos}, -1).reshape({T, 2 * F});
    sin = at::stack({sin, sin}, -1).reshape({T, 2 * F});
  }
  return {cos.to(dtype), sin.to(dtype)};
}

namespace {

at::Tensor Rotate(const at::Tensor& x, RotaryLayout layout) {
  const std::int64_t d = x.size(-1);
  if (layout == RotaryLayout::kRotateHalf) return at::cat({-x.narrow(-1, d / 2, d / 2), x.narrow(-1, 0, d / 2)}, -1);
  const auto sizes = x.sizes().vec();
  const at::Tensor pairs = x.reshape({-1, d / 2, 2});
  return at::stack({-pairs.select(-1, 1), pairs.select(-1, 0)}, -1).reshape(sizes);
}

}  // namespace

at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, RotaryLayout layout) {
  const std::int64_t r = cos.size(-1);
  TORCH_CHECK(r % 2 == 0 && r <= x.size(-1) && sin.sizes() == cos.sizes(),
              "ApplyRotary: cos/sin [..., R], R even <= head_dim");
  if (r == x.size(-1)) return x * cos + Rotate(x, layout) * sin;
  const at::Tensor rot = x.narrow(-1, 0, r);
  return at::cat({rot * cos + Rotate(rot, layout) * sin, x.narrow(-1, r, x.size(-1) - r)}, -1);
}

}  // namespace ropeserve

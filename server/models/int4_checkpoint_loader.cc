#include "server/models/int4_checkpoint_loader.h"

#include <ATen/ATen.h>

#include "server/models/weight_loader.h"

namespace ropeserve {

namespace {

at::Tensor Shifts() { return at::arange(0, 32, 4, at::kInt); }

// words [R, C] int32 -> [R, 8 C] uint8: value i of word c is column 8c + i.
at::Tensor NibblesAlongColumns(const at::Tensor& words) {
  return at::bitwise_and(at::bitwise_right_shift(words.unsqueeze(2), Shifts()), 15)
      .reshape({words.size(0), words.size(1) * 8})
      .to(at::kByte);
}

// words [R, C] int32 -> [8 R, C] uint8: value i of word r is row 8r + i.
at::Tensor NibblesAlongRows(const at::Tensor& words) {
  return at::bitwise_and(at::bitwise_right_shift(words.unsqueeze(1), Shifts().view({1, 8, 1})), 15)
      .reshape({words.size(0) * 8, words.size(1)})
      .to(at::kByte);
}

// AutoAWQ's GEMM order: value i of a word is column 8c + order[i], order =
// 0 2 4 6 1 3 5 7; so column 8c + j is value value_of[j].
at::Tensor AwqColumns(const at::Tensor& words) {
  const at::Tensor value_of = at::tensor({0, 4, 1, 5, 2, 6, 3, 7}, at::kLong);
  const at::Tensor nib = NibblesAlongColumns(words).reshape({words.size(0), words.size(1), 8});
  return nib.index_select(2, value_of).reshape({words.size(0), words.size(1) * 8});
}

at::Tensor ContiguousGroups(std::int64_t k, std::int64_t groups) {
  return at::div(at::arange(k, at::kLong), k / groups, "floor");
}

}  // namespace

StatusOr<Int4Levels> ReadInt4Levels(const Checkpoint& ckpt, const Int4Checkpoint& f, const std::string& m) {
  Int4Levels l;
  std::string g_idx_name;
  switch (f.format) {
    case Int4Format::kGptq: {
      l.q = NibblesAlongRows(LoadTensor(ckpt, m + ".qweight", at::kInt)).t().contiguous();
      l.zero = NibblesAlongColumns(LoadTensor(ckpt, m + ".qzeros", at::kInt)).t().contiguous();
      if (f.zeros_minus_one) l.zero += 1;
      l.scale = LoadTensor(ckpt, m + ".scales", at::kFloat).t().contiguous();
      if (ckpt.Find(m + ".g_idx") != nullptr) g_idx_name = m + ".g_idx";
      break;
    }
    case Int4Format::kAwq: {
      l.q = AwqColumns(LoadTensor(ckpt, m + ".qweight", at::kInt)).t().contiguous();
      l.zero = AwqColumns(LoadTensor(ckpt, m + ".qzeros", at::kInt)).t().contiguous();
      l.scale = LoadTensor(ckpt, m + ".scales", at::kFloat).t().contiguous();
      break;
    }
    case Int4Format::kCompressedTensors: {
      const at::Tensor packed = LoadTensor(ckpt, m + ".weight_packed", at::kInt);
      const at::Tensor shape = LoadTensor(ckpt, m + ".weight_shape", at::kLong);
      const std::int64_t n = packed.size(0), k = shape[1].item<std::int64_t>();
      if (shape[0].item<std::int64_t>() != n || k <= 0 || (k + 7) / 8 != packed.size(1))
        return InvalidArgument(ckpt.dir() + ": " + m + ".weight_shape [" +
                               std::to_string(shape[0].item<std::int64_t>()) + ", " + std::to_string(k) +
                               "] disagrees with weight_packed");
      l.q = NibblesAlongColumns(packed).narrow(1, 0, k).contiguous();
      l.scale = LoadTensor(ckpt, m + ".weight_scale", at::kFloat);
      if (!f.symmetric) {
        l.zero = NibblesAlongRows(LoadTensor(ckpt, m + ".weight_zero_point", at::kInt)).narrow(0, 0, n).contiguous();
      } else if (ckpt.Find(m + ".weight_zero_point") != nullptr) {
        const at::Tensor zp = LoadTensor(ckpt, m + ".weight_zero_point", at::kInt) + 8;  // signed -> stored levels
        if (zp.min().item<int>() < 0 || zp.max().item<int>() > 15)
          return InvalidArgument(ckpt.dir() + ": " + m + ".weight_zero_point is outside the 4-bit range [-8, 7]");
        l.zero = zp.to(at::kByte);
      } else {
        l.zero = at::full(l.scale.sizes(), 8, at::kByte);
      }
      if (f.act_order) g_idx_name = m + ".weight_g_idx";
      break;
    }
  }
  const std::int64_t k = l.q.size(1), groups = l.scale.size(1);
  if (!at::isfinite(l.scale).all().item<bool>())
    return InvalidArgument(ckpt.dir() + ": " + m + ": a scale is not finite");
  if (g_idx_name.empty()) {
    l.g_idx = ContiguousGroups(k, groups);
  } else {
    l.g_idx = LoadTensor(ckpt, g_idx_name, at::kLong);
    if (l.g_idx.min().item<std::int64_t>() < 0 || l.g_idx.max().item<std::int64_t>() >= groups)
      return InvalidArgument(ckpt.dir() + ": " + g_idx_name + " names a group outside [0, " + std::to_string(groups) +
                             ")");
    if (!(at::bincount(l.g_idx, {}, groups) == k / groups).all().item<bool>())
      return InvalidArgument(ckpt.dir() + ": " + g_idx_name + " does not give every group " +
                             std::to_string(k / groups) + " columns");
  }
  return l;
}

StatusOr<Int4Weight> PackInt4Levels(const std::vector<Int4Levels>& parts, const std::string& what) {
  std::vector<at::Tensor> qs, scales, zeros;
  for (const auto& p : parts) {
    if (!at::equal(p.g_idx, parts[0].g_idx))
      return InvalidArgument(what + ": projections that read the same input order their columns differently (g_idx)");
    qs.push_back(p.q);
    scales.push_back(p.scale);
    zeros.push_back(p.zero);
  }
  at::Tensor q = at::cat(qs, 0), scale = at::cat(scales, 0), zero = at::cat(zeros, 0);
  const std::int64_t k = q.size(1), group = k / scale.size(1);
  // A stable sort by group: each group's columns in their original order.
  at::Tensor perm = std::get<1>(at::sort(parts[0].g_idx, /*stable=*/true, 0, /*descending=*/false));
  if (at::equal(perm, at::arange(k, at::kLong)))
    perm = at::Tensor();
  else
    q = q.index_select(1, perm);
  const std::int64_t run = Int4KernelGroup(group);
  if (run == 0) return InvalidArgument(what + ": groups of " + std::to_string(group) + " columns");
  if (group != run) {
    scale = scale.repeat_interleave(group / run, 1);
    zero = zero.repeat_interleave(group / run, 1);
  }
  return PackInt4(q, scale.contiguous(), zero.contiguous(), run, perm);
}

}  // namespace ropeserve

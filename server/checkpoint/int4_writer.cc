#include "server/checkpoint/int4_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ropeserve {

namespace {

// splitmix64, for a portable shuffle (std::shuffle's is implementation-defined).
std::uint64_t Mix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

float RoundTo(DType dtype, float x) {
  if (dtype == DType::kBF16) return BF16ToFloat(FloatToBF16(x));
  if (dtype == DType::kF16) {
    // float16 -> float: exact; decoded by hand (dtype.h has no F16ToFloat).
    const std::uint16_t h = FloatToF16(x);
    const int e = (h >> 10) & 31, m = h & 1023;
    const float v = e == 0 ? std::ldexp(static_cast<float>(m), -24) : std::ldexp(1.0f + m / 1024.0f, e - 15);
    return (h & 0x8000) ? -v : v;
  }
  return x;
}

TensorToWrite Words(const std::string& name, const std::vector<std::int64_t>& shape,
                    const std::vector<std::uint32_t>& words) {
  TensorToWrite t{name, DType::kI32, shape, std::vector<std::uint8_t>(words.size() * 4)};
  std::memcpy(t.bytes.data(), words.data(), t.bytes.size());
  return t;
}

TensorToWrite Floats(const std::string& name, const std::vector<std::int64_t>& shape, const std::vector<float>& v,
                     DType dtype) {
  TensorToWrite t{name, dtype, shape, std::vector<std::uint8_t>(v.size() * DTypeSize(dtype))};
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(t.bytes.data() + 4 * i, &v[i], 4);
    } else {
      const std::uint16_t h = dtype == DType::kBF16 ? FloatToBF16(v[i]) : FloatToF16(v[i]);
      std::memcpy(t.bytes.data() + 2 * i, &h, 2);
    }
  }
  return t;
}

template <class T>
TensorToWrite Ints(const std::string& name, DType dtype, const std::vector<T>& v) {
  TensorToWrite t{name, dtype, {static_cast<std::int64_t>(v.size())}, std::vector<std::uint8_t>(v.size() * sizeof(T))};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

}  // namespace

std::vector<std::int32_t> Int4GroupIndex(const Int4Checkpoint& q, std::int64_t k, std::uint64_t seed) {
  const std::int64_t group = q.Group(k);
  std::vector<std::int64_t> order(static_cast<std::size_t>(k));
  for (std::int64_t i = 0; i < k; ++i) order[i] = i;
  if (q.act_order)
    for (std::int64_t i = k - 1; i > 0; --i) std::swap(order[i], order[Mix(seed) % static_cast<std::uint64_t>(i + 1)]);
  // Column order[i] is the i-th in quantization order: group i / group.
  std::vector<std::int32_t> g_idx(static_cast<std::size_t>(k));
  for (std::int64_t i = 0; i < k; ++i) g_idx[order[i]] = static_cast<std::int32_t>(i / group);
  return g_idx;
}

std::vector<TensorToWrite> WriteInt4Projection(const Int4Checkpoint& f, const std::string& m,
                                               const std::vector<float>& w, std::int64_t n, std::int64_t k,
                                               const std::vector<std::int32_t>& g_idx, DType scale_dtype) {
  const std::int64_t groups = k / f.Group(k);
  const DType stored = f.format == Int4Format::kCompressedTensors ? scale_dtype : DType::kF16;
  const int min_zero = f.zeros_minus_one ? 1 : 0;
  std::vector<std::uint8_t> q(static_cast<std::size_t>(n * k)), zero(static_cast<std::size_t>(n * groups));
  std::vector<float> scale(static_cast<std::size_t>(n * groups));
  for (std::int64_t r = 0; r < n; ++r) {
    std::vector<float> lo(groups, 0.0f), hi(groups, 0.0f);
    for (std::int64_t c = 0; c < k; ++c) {
      const float v = w[r * k + c];
      lo[g_idx[c]] = std::min(lo[g_idx[c]], v);
      hi[g_idx[c]] = std::max(hi[g_idx[c]], v);
    }
    for (std::int64_t g = 0; g < groups; ++g) {
      float s, z;
      if (f.symmetric) {
        s = RoundTo(stored, std::max(-lo[g], hi[g]) / 7.0f);
        z = 8;
      } else {
        s = RoundTo(stored, (hi[g] - lo[g]) / 15.0f);
        z = s > 0 ? std::clamp(std::nearbyint(-lo[g] / s), static_cast<float>(min_zero), 15.0f) : 8.0f;
      }
      scale[r * groups + g] = s;
      zero[r * groups + g] = static_cast<std::uint8_t>(z);
    }
    for (std::int64_t c = 0; c < k; ++c) {
      const std::int64_t g = g_idx[c];
      const float s = scale[r * groups + g], level = s > 0 ? std::nearbyint(w[r * k + c] / s) : 0.0f;
      q[r * k + c] = static_cast<std::uint8_t>(std::clamp(level + zero[r * groups + g], 0.0f, 15.0f));
    }
  }
  std::vector<TensorToWrite> out;
  auto transposed_scales = [&] {  // [groups, n]
    std::vector<float> t(scale.size());
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t g = 0; g < groups; ++g) t[g * n + r] = scale[r * groups + g];
    return t;
  };
  switch (f.format) {
    case Int4Format::kGptq: {
      std::vector<std::uint32_t> qweight(static_cast<std::size_t>(k / 8 * n)), qzeros(groups * (n / 8));
      for (std::int64_t c = 0; c < k; ++c)
        for (std::int64_t r = 0; r < n; ++r)
          qweight[(c / 8) * n + r] |= static_cast<std::uint32_t>(q[r * k + c]) << (4 * (c % 8));
      for (std::int64_t g = 0; g < groups; ++g)
        for (std::int64_t r = 0; r < n; ++r)
          qzeros[g * (n / 8) + r / 8] |= static_cast<std::uint32_t>(zero[r * groups + g] - min_zero) << (4 * (r % 8));
      out.push_back(Words(m + ".qweight", {k / 8, n}, qweight));
      out.push_back(Words(m + ".qzeros", {groups, n / 8}, qzeros));
      out.push_back(Floats(m + ".scales", {groups, n}, transposed_scales(), DType::kF16));
      out.push_back(Ints(m + ".g_idx", DType::kI32, g_idx));
      break;
    }
    case Int4Format::kAwq: {
      // AutoAWQ's GEMM packing: nibble i of a word holds output 8c + order[i].
      constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
      std::vector<std::uint32_t> qweight(static_cast<std::size_t>(k * (n / 8))), qzeros(groups * (n / 8));
      for (std::int64_t c = 0; c < k; ++c)
        for (std::int64_t word = 0; word < n / 8; ++word)
          for (int i = 0; i < 8; ++i)
            qweight[c * (n / 8) + word] |= static_cast<std::uint32_t>(q[(word * 8 + kOrder[i]) * k + c]) << (4 * i);
      for (std::int64_t g = 0; g < groups; ++g)
        for (std::int64_t word = 0; word < n / 8; ++word)
          for (int i = 0; i < 8; ++i)
            qzeros[g * (n / 8) + word] |= static_cast<std::uint32_t>(zero[(word * 8 + kOrder[i]) * groups + g])
                                          << (4 * i);
      out.push_back(Words(m + ".qweight", {k, n / 8}, qweight));
      out.push_back(Words(m + ".qzeros", {groups, n / 8}, qzeros));
      out.push_back(Floats(m + ".scales", {groups, n}, transposed_scales(), DType::kF16));
      break;
    }
    case Int4Format::kCompressedTensors: {
      // Levels are the signed values + 8, so q and the zero point's stored
      // nibble are this writer's levels as they are; padding nibbles 0.
      const std::int64_t kw = (k + 7) / 8, nw = (n + 7) / 8;
      std::vector<std::uint32_t> packed(static_cast<std::size_t>(n * kw)), zp(static_cast<std::size_t>(nw * groups));
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t c = 0; c < k; ++c)
          packed[r * kw + c / 8] |= static_cast<std::uint32_t>(q[r * k + c]) << (4 * (c % 8));
      out.push_back(Words(m + ".weight_packed", {n, kw}, packed));
      out.push_back(Floats(m + ".weight_scale", {n, groups}, scale, scale_dtype));
      out.push_back(Ints(m + ".weight_shape", DType::kI64, std::vector<std::int64_t>{n, k}));
      if (!f.symmetric) {
        for (std::int64_t r = 0; r < n; ++r)
          for (std::int64_t g = 0; g < groups; ++g)
            zp[(r / 8) * groups + g] |= static_cast<std::uint32_t>(zero[r * groups + g]) << (4 * (r % 8));
        out.push_back(Words(m + ".weight_zero_point", {nw, groups}, zp));
      }
      if (f.act_order) out.push_back(Ints(m + ".weight_g_idx", DType::kI32, g_idx));
      break;
    }
  }
  return out;
}

}  // namespace ropeserve

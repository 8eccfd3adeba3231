#include "server/checkpoint/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace ropeserve {

namespace {

std::vector<double> DefaultInvFreq(double base, std::int64_t dim) {
  std::vector<double> f(static_cast<std::size_t>(dim / 2));
  for (std::int64_t i = 0; i < dim / 2; ++i)
    f[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));
  return f;
}

double YarnMscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// Inverse of "dimension index -> number of rotations over the context".
double YarnCorrectionDim(double num_rotations, double dim, double base, double max_pos) {
  return (dim * std::log(max_pos / (num_rotations * 2.0 * std::numbers::pi))) / (2.0 * std::log(base));
}

}  // namespace

RopeFrequencies ComputeRopeFrequencies(const ModelConfig& c, std::int64_t seq_len) {
  const std::int64_t dim = c.rotary_dim();
  const RopeScaling& s = c.rope_scaling;
  RopeFrequencies out;

  if (s.type == "default") {
    out.inv_freq = DefaultInvFreq(c.rope_theta, dim);
  } else if (s.type == "linear") {
    out.inv_freq = DefaultInvFreq(c.rope_theta, dim);
    for (auto& f : out.inv_freq) f /= s.factor;
  } else if (s.type == "dynamic") {
    const double max_pos = static_cast<double>(c.max_position_embeddings);
    const double len = std::max(static_cast<double>(seq_len), max_pos);
    const double d = static_cast<double>(dim);
    const double base = c.rope_theta * std::pow((s.factor * len / max_pos) - (s.factor - 1.0), d / (d - 2.0));
    out.inv_freq = DefaultInvFreq(base, dim);
  } else if (s.type == "llama3") {
    out.inv_freq = DefaultInvFreq(c.rope_theta, dim);
    const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
    const double low_wavelen = old_ctx / s.low_freq_factor;
    const double high_wavelen = old_ctx / s.high_freq_factor;
    for (auto& f : out.inv_freq) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen < high_wavelen) continue;  // high frequencies: unchanged
      if (wavelen > low_wavelen) {           // low frequencies: interpolated
        f /= s.factor;
        continue;
      }
      const double smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1.0 - smooth) * f / s.factor + smooth * f;
    }
  } else if (s.type == "yarn") {
    const double d = static_cast<double>(dim);
    if (s.attention_factor) {
      out.attention_factor = *s.attention_factor;
    } else if (s.mscale && s.mscale_all_dim && *s.mscale != 0 && *s.mscale_all_dim != 0) {
      out.attention_factor = YarnMscale(s.factor, *s.mscale) / YarnMscale(s.factor, *s.mscale_all_dim);
    } else {
      out.attention_factor = YarnMscale(s.factor, 1.0);
    }
    const double orig = static_cast<double>(s.original_max_position_embeddings);
    double low = YarnCorrectionDim(s.beta_fast, d, c.rope_theta, orig);
    double high = YarnCorrectionDim(s.beta_slow, d, c.rope_theta, orig);
    if (s.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, d - 1.0);
    if (low == high) high += 0.001;  // as the reference: avoid a zero-width ramp
    const auto base_freq = DefaultInvFreq(c.rope_theta, dim);
    out.inv_freq.resize(base_freq.size());
    for (std::size_t i = 0; i < base_freq.size(); ++i) {
      const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
      const double extrapolation_weight = 1.0 - ramp;
      const double interpolated = base_freq[i] / s.factor;
      out.inv_freq[i] = interpolated * (1.0 - extrapolation_weight) + base_freq[i] * extrapolation_weight;
    }
  }
  return out;
}

}  // namespace ropeserve

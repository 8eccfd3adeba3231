// Splitting a packed span-head output into per-window SpanLogits (shared by
// the encoder families and the decoder span heads).
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <vector>

#include "server/models/span_logits.h"

namespace ropeserve {

// Windows laid end to end without padding: their ids, each token's position
// in its own window, and window k's rows [starts[k], starts[k + 1]).
struct PackedWindows {
  std::vector<std::int64_t> ids, positions, starts;
  std::int64_t longest = 0;
};
template <typename Id>
PackedWindows PackWindows(const std::vector<std::vector<Id>>& windows) {
  PackedWindows p;
  for (const auto& w : windows) {
    p.starts.push_back(static_cast<std::int64_t>(p.ids.size()));
    for (std::size_t j = 0; j < w.size(); ++j) {
      p.ids.push_back(static_cast<std::int64_t>(w[j]));
      p.positions.push_back(static_cast<std::int64_t>(j));
    }
    p.longest = std::max(p.longest, static_cast<std::int64_t>(w.size()));
  }
  p.starts.push_back(static_cast<std::int64_t>(p.ids.size()));
  return p;
}

// Rows [begin, begin + len) of logits [T, 2] (only those rows are copied,
// as float32), and of `hidden` [T, H] when it is defined.
SpanLogits SpanRows(const at::Tensor& logits, std::int64_t begin, std::int64_t len, const at::Tensor& hidden = {});

}  // namespace ropeserve

// A span head's output rows as SpanLogits (shared by the encoder families
// and the decoder span heads).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "server/models/span_logits.h"

namespace ropeserve {

// Rows [begin, begin + len) of logits [T, 2] (only those rows are copied,
// as float32; none when undefined: a model without a head), and of
// `hidden` [T, H] when it is defined.
SpanLogits SpanRows(const at::Tensor& logits, std::int64_t begin, std::int64_t len, const at::Tensor& hidden = {});
// A classifier's logits ([num_labels] or [len, num_labels], any device and
// floating dtype) into out.classes as float32, row-major.
void SetClasses(SpanLogits& out, const at::Tensor& logits);

}  // namespace ropeserve

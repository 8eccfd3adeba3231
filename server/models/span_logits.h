// A head's output for one window: span logits, a classifier's logits, or a base model's hidden state. Torch-free.
#pragma once

#include <cstdint>
#include <vector>

namespace ropeserve {

struct SpanLogits {
  std::vector<float> start;  // empty for a model without a head
  std::vector<float> end;
  // The trunk's last hidden state, [len, hidden] row-major; filled when
  // asked for (`ropeserve encode`), and always for a model without a head
  // (EncoderHead::kNone: embedders pool it).
  std::vector<float> hidden;
  // A classifier's logits: [num_labels] for a sequence classifier, [len,
  // num_labels] row-major for a token classifier; empty otherwise.
  std::vector<float> classes;
};

}  // namespace ropeserve

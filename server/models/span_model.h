// What extractive QA needs from a model: windows of token ids in, per-token
// start/end span logits out. The QA service (server/service/qa_service.h)
// sees only this interface; the families implement it behind LoadSpanModel
// (server/models/span_model_loader.h). Torch-free.
#pragma once

#include <cstdint>
#include <vector>

#include "server/checkpoint/encoder_config.h"
#include "server/common/status.h"
#include "server/common/token_id.h"
#include "server/models/span_logits.h"

namespace ropeserve {

// Thread-safety: const methods may run concurrently.
class SpanModel {
 public:
  virtual ~SpanModel() = default;
  virtual const EncoderConfig& config() const = 0;
  // The reference path: one window computed as Hugging Face's eager modules
  // do (dense masks, unfused ops); the oracle of ForwardWindows.
  // Unimplemented for the decoder trunks (their oracle is test code).
  virtual StatusOr<SpanLogits> ForwardReference(const std::vector<TokenId>& ids,
                                                const std::vector<std::uint32_t>& type_ids = {},
                                                bool with_hidden = false) const = 0;
  // The serving path: several windows in one call, each computed on tensors
  // of its own shape (a window's logits do not depend on the others).
  // `type_ids` (token types, RoFormer) may be empty: all 0. `with_hidden`
  // also returns the trunk's last hidden state.
  virtual StatusOr<std::vector<SpanLogits>> ForwardWindows(const std::vector<std::vector<TokenId>>& windows,
                                                           const std::vector<std::vector<std::uint32_t>>& type_ids = {},
                                                           bool with_hidden = false) const = 0;
};

}  // namespace ropeserve

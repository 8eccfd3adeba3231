// What the span-model families (modernbert.cc, roformer.cc, and the
// decoder's span head in span_model_loader.cc) share: typed Linear / LayerNorm
// weights, loading a checkpoint's tensors checked against the config, the
// window checks, and the two forward paths over windows. Internal to
// server/models (it includes ATen).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/packed_linear.h"
#include "server/checkpoint/dtype.h"
#include "server/checkpoint/encoder_config.h"
#include "server/common/status.h"
#include "server/models/span_model.h"
#include "server/models/weight_loader.h"

namespace ropeserve::encoder {

// y = x W^T (+ b). On the CPU, float32 and bfloat16 weights are packed
// for the kernels' GEMM at load (kernels/cpu/packed_linear.h: no OpenMP
// region, the same bits whatever the batch); elsewhere at::linear.
struct Linear {
  at::Tensor weight;         // [out, in]; undefined when packed
  at::Tensor bias;           // [out] or undefined
  cpu::PackedWeight packed;  // [out, in] in panels, replacing weight
  at::Tensor operator()(const at::Tensor& x) const;
};

// LayerNorm over the last dimension. weight: [n]; bias: [n] or undefined.
struct LayerNorm {
  at::Tensor weight, bias;
  at::Tensor operator()(const at::Tensor& x, double eps) const {
    return at::layer_norm(x, {x.size(-1)}, weight, bias, eps);
  }
};

// A checkpoint's model.safetensors, every tensor the config expects
// checked (present, shape, floating dtype) and converted to the compute
// dtype. The families move what they need into their typed weights.
class TensorSet {
 public:
  // Every tensor in `dtype` on `device`.
  static StatusOr<TensorSet> Load(const std::string& dir, const EncoderConfig& config, at::ScalarType dtype,
                                  at::Device device = at::kCPU);
  // Expected tensors (the config's list) are present after Load.
  at::Tensor Take(const std::string& name);
  Linear TakeLinear(const std::string& prefix);  // prefix.weight, prefix.bias when the checkpoint has it
  LayerNorm TakeNorm(const std::string& prefix);

 private:
  std::map<std::string, at::Tensor> t_;
};

at::Tensor Activation(const at::Tensor& x, const std::string& act);

// Attention probabilities: softmax in float32, then the compute dtype (as
// Hugging Face's eager attention for 16-bit models).
inline at::Tensor Softmax(const at::Tensor& scores) {
  return at::softmax(scores, -1, at::kFloat).to(scores.scalar_type());
}

std::vector<std::int64_t> ToInt64(const std::vector<TokenId>& ids);
// "cpu", "cuda" or "cuda:N" as a device; CUDA only in builds that have it.
StatusOr<at::Device> ParseDevice(const std::string& name);
std::vector<std::int64_t> ToInt64(const std::vector<std::uint32_t>& type_ids);

// A span model that computes one window at a time: the checks and the
// loops over windows for both paths. Every window runs on tensors of its
// own shape (GEMM libraries round a row differently depending on the
// matrix it sits in; OpenBLAS does), so a window's logits do not depend on
// the other windows of a call.
class WindowedSpanModel : public SpanModel {
 public:
  explicit WindowedSpanModel(EncoderConfig config) : config_(std::move(config)) {}
  const EncoderConfig& config() const final { return config_; }
  StatusOr<SpanLogits> ForwardReference(const std::vector<TokenId>& ids,
                                        const std::vector<std::uint32_t>& type_ids = {},
                                        bool with_hidden = false) const final;
  StatusOr<std::vector<SpanLogits>> ForwardWindows(const std::vector<std::vector<TokenId>>& windows,
                                                   const std::vector<std::vector<std::uint32_t>>& type_ids = {},
                                                   bool with_hidden = false) const final;

 protected:
  // One checked window. `reference`: Hugging Face's eager computation
  // (dense masks, unfused ops); else the serving path.
  virtual SpanLogits Window(const std::vector<TokenId>& ids, const std::vector<std::uint32_t>& type_ids, bool reference,
                            bool with_hidden) const = 0;
  // Whether Window(reference = true) exists: not for the decoder trunks,
  // whose oracle runs in the tests only (see span_model_loader.cc).
  virtual Status ReferenceAvailable() const { return Status::Ok(); }

 private:
  Status CheckIds(const std::vector<TokenId>& ids, const std::vector<std::uint32_t>& type_ids) const;
  EncoderConfig config_;
};

}  // namespace ropeserve::encoder

#include "server/models/encoder_parts.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "kernels/cpu/thread_pool.h"
#include "server/checkpoint/safetensors.h"
#include "server/models/device.h"

namespace ropeserve::encoder {

StatusOr<TensorSet> TensorSet::Load(const std::string& dir, const EncoderConfig& config, at::ScalarType dtype,
                                    at::Device device) {
  const std::string path = dir + "/model.safetensors";
  RS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
  TensorSet set;
  // A base model (no head) as Hugging Face saves it names its tensors
  // without the family's prefix; one with the prefix (cut from a model with
  // a head) loads too. One spelling per file.
  std::string strip;
  if (config.head == EncoderHead::kNone) {
    const std::string prefix = BaseModelPrefix(config.family);
    const std::string first = ExpectedEncoderTensors(config).front().name;
    if (file->Find(first) == nullptr && file->Find(first.substr(prefix.size())) != nullptr) strip = prefix;
  }
  for (const TensorSpec& spec : ExpectedEncoderTensors(config)) {
    const std::string name = spec.name.substr(strip.size());
    const TensorInfo* info = file->Find(name);
    if (info == nullptr) return InvalidArgument(path + ": missing tensor " + name);
    if (info->shape != spec.shape) {
      std::string want, got;
      for (auto d : spec.shape) want += std::to_string(d) + " ";
      for (auto d : info->shape) got += std::to_string(d) + " ";
      return InvalidArgument(path + ": tensor " + name + " has shape [ " + got + "], the config says [ " + want + "]");
    }
    if (info->dtype != DType::kF32 && info->dtype != DType::kBF16 && info->dtype != DType::kF16)
      return InvalidArgument(path + ": tensor " + name + " is not a floating-point tensor");
    at::Tensor t = at::empty(info->shape, at::TensorOptions().dtype(ToScalarType(info->dtype)));
    std::memcpy(t.data_ptr(), file->Data(*info), info->end - info->begin);
    set.t_[spec.name] = t.to(device, dtype);
  }
  return set;
}

at::Tensor TensorSet::Take(const std::string& name) {
  auto it = t_.find(name);
  // Load checked the config's list; a name outside it is a bug here.
  TORCH_CHECK(it != t_.end(), "span model: no tensor ", name);
  at::Tensor t = std::move(it->second);
  t_.erase(it);
  return t;
}

Linear TensorSet::TakeLinear(const std::string& prefix) {
  Linear l;
  l.weight = Take(prefix + ".weight");
  if (t_.count(prefix + ".bias") != 0) l.bias = Take(prefix + ".bias");
  const at::ScalarType dtype = l.weight.scalar_type();
  if (l.weight.is_cpu() && (dtype == at::kFloat || dtype == at::kBFloat16)) {
    l.packed = cpu::PackWeight(l.weight, dtype);
    l.weight = at::Tensor();
  }
  return l;
}

at::Tensor Linear::operator()(const at::Tensor& x) const {
  if (!packed.defined()) return at::linear(x, weight, bias);
  // The kernel takes rows: leading dimensions flattened, then restored.
  std::vector<std::int64_t> sizes = x.sizes().vec();
  const at::Tensor y = cpu::PackedLinear(x.reshape({-1, packed.k}), packed, bias);
  sizes.back() = packed.n;
  return y.view(sizes);
}

LayerNorm TensorSet::TakeNorm(const std::string& prefix) {
  LayerNorm n;
  n.weight = Take(prefix + ".weight");
  if (t_.count(prefix + ".bias") != 0) n.bias = Take(prefix + ".bias");
  return n;
}

at::Tensor Activation(const at::Tensor& x, const std::string& act) {
  if (act == "gelu" || act == "gelu_python") return at::gelu(x);  // exact (erf)
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return at::gelu(x, "tanh");
  if (act == "relu") return at::relu(x);
  return at::silu(x);
}

StatusOr<at::Device> ParseDevice(const std::string& name) {
  if (name == "cpu") return at::Device(at::kCPU);
#ifdef ROPESERVE_HAVE_CUDA
  std::optional<at::Device> d;
  try {
    d = at::Device(name);
  } catch (const std::exception&) {
  }
  if (!d || !d->is_cuda()) return InvalidArgument("device '" + name + "' must be cpu, cuda or cuda:N");
  RS_RETURN_IF_ERROR(CheckDeviceUsable(*d));
  return *d;
#else
  return InvalidArgument("device '" + name + "': this build has CPU workers only (its LibTorch has no CUDA)");
#endif
}

std::vector<std::int64_t> ToInt64(const std::vector<TokenId>& ids) {
  return std::vector<std::int64_t>(ids.begin(), ids.end());
}
std::vector<std::int64_t> ToInt64(const std::vector<std::uint32_t>& type_ids) {
  return std::vector<std::int64_t>(type_ids.begin(), type_ids.end());
}

Status WindowedSpanModel::CheckIds(const std::vector<TokenId>& ids, const std::vector<std::uint32_t>& type_ids) const {
  if (ids.empty()) return InvalidArgument("an empty window");
  // Only RoFormer has token types; the other families ignore them.
  if (!type_ids.empty() && config_.family == EncoderFamily::kRoFormer) {
    if (type_ids.size() != ids.size()) return InvalidArgument("token type ids and ids differ in length");
    for (auto t : type_ids)
      if (static_cast<std::int64_t>(t) >= std::max<std::int64_t>(config_.type_vocab_size, 1))
        return InvalidArgument("token type id " + std::to_string(t) + " is outside the model's type vocabulary");
  }
  if (static_cast<std::int64_t>(ids.size()) > config_.max_position_embeddings)
    return InvalidArgument("a window of " + std::to_string(ids.size()) + " tokens exceeds max_position_embeddings " +
                           std::to_string(config_.max_position_embeddings));
  for (auto id : ids)
    if (id < 0 || static_cast<std::int64_t>(id) >= config_.vocab_size)
      return InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary");
  return Status::Ok();
}

StatusOr<SpanLogits> WindowedSpanModel::ForwardReference(const std::vector<TokenId>& ids,
                                                         const std::vector<std::uint32_t>& type_ids,
                                                         bool with_hidden) const {
  RS_RETURN_IF_ERROR(ReferenceAvailable());
  RS_RETURN_IF_ERROR(CheckIds(ids, type_ids));
  return Window(ids, type_ids, /*reference=*/true, with_hidden);
}

StatusOr<std::vector<SpanLogits>> WindowedSpanModel::ForwardWindows(
    const std::vector<std::vector<TokenId>>& windows, const std::vector<std::vector<std::uint32_t>>& type_ids,
    bool with_hidden) const {
  if (!type_ids.empty() && type_ids.size() != windows.size())
    return InvalidArgument("token type ids are needed for every window or none");
  static const std::vector<std::uint32_t> kNoTypes;
  auto types = [&](std::size_t k) -> const std::vector<std::uint32_t>& {
    return type_ids.empty() ? kNoTypes : type_ids[k];
  };
  for (std::size_t k = 0; k < windows.size(); ++k) RS_RETURN_IF_ERROR(CheckIds(windows[k], types(k)));
  // One window a task on the kernels' pool, each on one thread (its
  // kernels run inline there): a call of many windows keeps every core
  // busy with no OpenMP region, a thread that loses its core holds up only
  // its window, and each window's result is the same whatever the others.
  std::vector<SpanLogits> out(windows.size());
  cpu::ParallelFor(0, static_cast<std::int64_t>(windows.size()), 1, [&](std::int64_t begin, std::int64_t end) {
    c10::InferenceMode guard;
    for (std::int64_t k = begin; k < end; ++k) {
      const auto w = static_cast<std::size_t>(k);
      out[w] = Window(windows[w], types(w), /*reference=*/false, with_hidden);
    }
  });
  return out;
}

}  // namespace ropeserve::encoder

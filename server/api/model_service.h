// What the API layers share: the served model, its public name, request ids,
// and generation. Until the batching engine lands, generations run one at a
// time under a mutex here, whichever transport they came from.
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "server/checkpoint/model_config.h"
#include "server/runner/generate.h"

namespace ropeserve {
class DecoderModel;
}

namespace ropeserve::api {

class ModelService {
 public:
  ModelService(const DecoderModel& model, std::string served_name);

  const std::string& name() const { return name_; }
  const ModelConfig& config() const;
  // OK for "" (the only model) or the served name; NotFound otherwise.
  Status CheckModelName(const std::string& requested) const;
  StatusOr<GenerateResult> Generate(const std::vector<std::int64_t>& prompt_ids, const GenerateOptions& options);
  // "<prefix>-<n>", unique within the process.
  std::string NextRequestId(const char* prefix);

 private:
  const DecoderModel& model_;
  std::string name_;
  std::mutex mu_;
  std::atomic<std::uint64_t> counter_{0};
};

}  // namespace ropeserve::api

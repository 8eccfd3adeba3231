#include "server/api/model_service.h"

#include "server/models/decoder.h"

namespace ropeserve::api {

ModelService::ModelService(const DecoderModel& model, std::string served_name)
    : model_(model), name_(std::move(served_name)) {}

const ModelConfig& ModelService::config() const { return model_.config(); }

Status ModelService::CheckModelName(const std::string& requested) const {
  if (requested.empty() || requested == name_) return Status::Ok();
  return NotFound("model '" + requested + "' does not exist (served: '" + name_ + "')");
}

StatusOr<GenerateResult> ModelService::Generate(const std::vector<std::int64_t>& prompt_ids,
                                                const GenerateOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  return ropeserve::Generate(model_, prompt_ids, options);
}

std::string ModelService::NextRequestId(const char* prefix) {
  return std::string(prefix) + "-" + std::to_string(++counter_);
}

}  // namespace ropeserve::api

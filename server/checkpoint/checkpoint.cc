#include "server/checkpoint/checkpoint.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <set>

#include "server/common/json_file.h"

namespace ropeserve {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string ShapeString(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Shard file names come from the index: keep them inside the directory.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name.find('\\') == std::string::npos && name != "." &&
         name != "..";
}

StatusOr<std::map<std::string, std::string>> ReadIndex(const std::string& path) {
  RS_ASSIGN_OR_RETURN(json j, ReadJsonObjectFile(path));
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    return InvalidArgument(path + ": no 'weight_map' object");
  std::map<std::string, std::string> map;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string() || !IsPlainFileName(file.get<std::string>()))
      return InvalidArgument(path + ": weight_map entry for '" + name + "' is not a file name in the directory");
    map[name] = file.get<std::string>();
  }
  return map;
}

}  // namespace

StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir, bool as_trunk) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound(dir + ": not a directory");
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  ckpt->dir_ = dir;
  RS_ASSIGN_OR_RETURN(ckpt->config_, LoadModelConfig(dir));
  const ModelConfig& config = ckpt->config_;
  if (as_trunk) {
    if (config.span_head)
      return InvalidArgument(dir + ": " + config.architecture + " has a span head: serve it with --qa");
    if (config.sequence_head)
      return InvalidArgument(dir + ": " + config.architecture + " is a classifier, not a trunk to pool");
    if (config.int4_weights) return Unimplemented(dir + ": a trunk of 4-bit weights is not supported");
    ckpt->config_.base_model = true;
  }

  const std::string index_path = dir + "/model.safetensors.index.json";
  const std::string single_path = dir + "/model.safetensors";
  std::map<std::string, std::string> index;  // tensor -> shard file name
  std::vector<std::string> file_names;
  if (fs::exists(index_path, ec)) {
    RS_ASSIGN_OR_RETURN(index, ReadIndex(index_path));
    std::set<std::string> unique;
    for (const auto& [_, f] : index) unique.insert(f);
    file_names.assign(unique.begin(), unique.end());
  } else if (fs::exists(single_path, ec)) {
    file_names.push_back("model.safetensors");
  } else {
    std::string hint;
    if (fs::exists(dir + "/pytorch_model.bin", ec))
      hint = " (pytorch_model.bin is not supported: convert the checkpoint to safetensors)";
    return NotFound(dir + ": no model.safetensors or model.safetensors.index.json" + hint);
  }

  for (const auto& name : file_names) {
    RS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(dir + "/" + name));
    const SafetensorsFile* f = file.get();
    for (const auto& [tname, info] : f->tensors()) {
      if (!index.empty()) {
        auto it = index.find(tname);
        // The index decides which shard holds a tensor; copies elsewhere are ignored.
        if (it == index.end() || it->second != name) continue;
      }
      auto [pos, inserted] = ckpt->tensors_.emplace(tname, TensorRef{f, &info});
      if (!inserted)
        return InvalidArgument(f->path() + ": tensor '" + tname + "' also appears in " + pos->second.file->path());
    }
    ckpt->files_.push_back(std::move(file));
  }
  for (const auto& [tname, fname] : index)
    if (ckpt->tensors_.find(tname) == ckpt->tensors_.end())
      return NotFound(dir + "/" + fname + ": tensor '" + tname + "' listed in " + index_path + " is not in the file");

  // A span head's trunk is "transformer." in Hugging Face's classes; some
  // checkpoints of these classes name it "model.".
  if (config.span_head && ckpt->tensors_.count("transformer.embed_tokens.weight") == 0 &&
      ckpt->tensors_.count("model.embed_tokens.weight") != 0)
    ckpt->config_.trunk_prefix = "model.";

  // A base model's trunk is unprefixed as Hugging Face saves it; a causal
  // LM's is "model."; one file names it one way or the other.
  if (config.base_model)
    ckpt->config_.trunk_prefix = ckpt->tensors_.count("model.embed_tokens.weight") != 0 ? "model." : "";

  // Every expected tensor present, with the right shape and dtype.
  std::set<std::string> expected_names;
  for (const auto& spec : ExpectedTensors(config)) {
    expected_names.insert(spec.name);
    auto it = ckpt->tensors_.find(spec.name);
    if (it == ckpt->tensors_.end()) {
      if (spec.optional) continue;
      return NotFound(dir + ": missing tensor '" + spec.name + "' required by " + config.architecture +
                      (config.int4_weights ? std::string(" (") + Int4FormatName(config.int4_weights->format) + ")"
                                           : std::string()));
    }
    const TensorInfo& info = *it->second.info;
    if (info.shape != spec.shape)
      return InvalidArgument(it->second.file->path() + ": tensor '" + spec.name + "' has shape " +
                             ShapeString(info.shape) + ", config.json implies " + ShapeString(spec.shape));
    const bool dtype_ok = spec.dtypes.empty()
                              ? IsFloatWeightDType(info.dtype)
                              : std::find(spec.dtypes.begin(), spec.dtypes.end(), info.dtype) != spec.dtypes.end();
    if (!dtype_ok) {
      std::string allowed;
      for (DType d : spec.dtypes) allowed += std::string(allowed.empty() ? "" : ", ") + DTypeSafetensorsName(d);
      return Unimplemented(it->second.file->path() + ": tensor '" + spec.name + "' has dtype " +
                           DTypeSafetensorsName(info.dtype) +
                           " (supported: " + (allowed.empty() ? "F32, F16, BF16" : allowed) + ")");
    }
  }
  for (const auto& [tname, ref] : ckpt->tensors_) {
    if (expected_names.count(tname) == 0 && !IsIgnorableTensor(tname, config))
      return InvalidArgument(ref.file->path() + ": unexpected tensor '" + tname + "' (not part of " +
                             config.architecture + " with this config.json)");
  }
  return ckpt;
}

const Checkpoint::TensorRef* Checkpoint::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace ropeserve

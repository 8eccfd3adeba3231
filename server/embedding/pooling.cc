#include "server/embedding/pooling.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "server/common/json_file.h"
#include "server/common/json_reader.h"

namespace ropeserve::embedding {

namespace {

using json = nlohmann::json;

// 1_Pooling/config.json (the Pooling module's folder is named by modules.json).
Status ReadPoolingModule(const std::string& path, EmbeddingConfig& c) {
  RS_ASSIGN_OR_RETURN(json j, ReadJsonObjectFile(path));
  JsonReader r(j, path);
  const std::pair<const char*, Pooling> modes[] = {{"pooling_mode_cls_token", Pooling::kCls},
                                                   {"pooling_mode_mean_tokens", Pooling::kMean},
                                                   {"pooling_mode_max_tokens", Pooling::kMax},
                                                   {"pooling_mode_lasttoken", Pooling::kLastToken}};
  int chosen = 0;
  for (const auto& [key, mode] : modes) {
    RS_ASSIGN_OR_RETURN(bool on, r.Bool(key, false));
    if (!on) continue;
    c.pooling = mode;
    ++chosen;
  }
  for (const char* key : {"pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens"}) {
    RS_ASSIGN_OR_RETURN(bool on, r.Bool(key, false));
    if (on) return Unimplemented(path + ": '" + key + "' pooling is not supported (cls, mean, max, lasttoken are)");
  }
  if (chosen == 0) return InvalidArgument(path + ": no pooling_mode_* is true");
  if (chosen > 1)
    return Unimplemented(path + ": several pooling modes at once (their concatenation) are not supported");
  RS_ASSIGN_OR_RETURN(c.include_prompt, r.Bool("include_prompt", true));
  return Status::Ok();
}

// modules.json: the transformer, then Pooling, then optionally Normalize.
Status ReadModules(const std::string& dir, EmbeddingConfig& c) {
  const std::string path = dir + "/modules.json";
  RS_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_array()) return InvalidArgument(path + ": not a JSON list of modules");
  bool pooling = false;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string where = path + "[" + std::to_string(i) + "]";
    if (!j[i].is_object()) return InvalidArgument(where + ": a module is an object");
    JsonReader r(j[i], where);
    RS_ASSIGN_OR_RETURN(std::string type, r.String("type"));
    RS_ASSIGN_OR_RETURN(std::string folder, r.String("path", std::string()));
    const std::string kind = type.substr(type.rfind('.') == std::string::npos ? 0 : type.rfind('.') + 1);
    if (kind == "Transformer") {
      if (i != 0) return Unimplemented(where + ": the Transformer module must come first");
    } else if (kind == "Pooling") {
      // A folder name from the file: one path component, inside `dir`.
      if (folder.empty() || folder.find('/') != std::string::npos || folder == "." || folder == "..")
        return InvalidArgument(where + ": 'path' must name a folder inside the model directory");
      RS_RETURN_IF_ERROR(ReadPoolingModule(dir + "/" + folder + "/config.json", c));
      pooling = true;
    } else if (kind == "Normalize") {
      if (!pooling) return Unimplemented(where + ": Normalize before Pooling is not supported");
      c.normalize = true;
    } else {
      return Unimplemented(where + ": module '" + type + "' is not supported (Transformer, Pooling and Normalize are)");
    }
  }
  if (!pooling) return Unimplemented(path + ": no Pooling module (token embeddings are not served)");
  c.source = "sentence-transformers";
  return Status::Ok();
}

}  // namespace

StatusOr<Pooling> ParsePooling(const std::string& name) {
  if (name == "cls") return Pooling::kCls;
  if (name == "mean") return Pooling::kMean;
  if (name == "max") return Pooling::kMax;
  if (name == "lasttoken" || name == "last") return Pooling::kLastToken;
  return InvalidArgument("pooling '" + name + "' must be cls, mean, max or lasttoken");
}

const char* PoolingName(Pooling p) {
  switch (p) {
    case Pooling::kCls:
      return "cls";
    case Pooling::kMax:
      return "max";
    case Pooling::kLastToken:
      return "lasttoken";
    case Pooling::kMean:
      break;
  }
  return "mean";
}

StatusOr<EmbeddingConfig> LoadEmbeddingConfig(const std::string& dir) {
  namespace fs = std::filesystem;
  EmbeddingConfig c;
  std::error_code ec;
  if (fs::exists(dir + "/modules.json", ec)) RS_RETURN_IF_ERROR(ReadModules(dir, c));
  if (const std::string path = dir + "/config_sentence_transformers.json"; fs::exists(path, ec)) {
    RS_ASSIGN_OR_RETURN(json j, ReadJsonObjectFile(path));
    if (j.contains("prompts") && !j["prompts"].is_null()) {
      if (!j["prompts"].is_object()) return InvalidArgument(path + ": 'prompts' must map names to strings");
      for (auto it = j["prompts"].begin(); it != j["prompts"].end(); ++it) {
        if (!it.value().is_string()) return InvalidArgument(path + ": prompt '" + it.key() + "' must be a string");
        c.prompts[it.key()] = it.value().get<std::string>();
      }
    }
    JsonReader r(j, path);
    RS_ASSIGN_OR_RETURN(c.default_prompt_name, r.String("default_prompt_name", std::string()));
    if (!c.default_prompt_name.empty() && c.prompts.count(c.default_prompt_name) == 0)
      return InvalidArgument(path + ": default_prompt_name '" + c.default_prompt_name + "' is not in 'prompts'");
  }
  if (const std::string path = dir + "/sentence_bert_config.json"; fs::exists(path, ec)) {
    RS_ASSIGN_OR_RETURN(json j, ReadJsonObjectFile(path));
    JsonReader r(j, path);
    if (r.Has("max_seq_length")) {
      RS_ASSIGN_OR_RETURN(std::int64_t n, r.Int("max_seq_length"));
      if (n < 1) return InvalidArgument(path + ": 'max_seq_length' must be positive");
      c.max_seq_length = n;
    }
  }
  return c;
}

std::vector<float> Pool(std::span<const float> hidden, std::int64_t len, std::int64_t dim, Pooling pooling,
                        std::int64_t first) {
  std::vector<float> out(static_cast<std::size_t>(dim), 0.0f);
  if (len <= 0 || dim <= 0) return out;
  auto row = [&](std::int64_t t) { return hidden.subspan(static_cast<std::size_t>(t * dim), dim); };
  first = std::clamp<std::int64_t>(first, 0, len - 1);  // at least one token pools
  switch (pooling) {
    case Pooling::kCls: {  // the first token, whatever the prompt (as sentence-transformers)
      auto r = row(0);
      std::copy(r.begin(), r.end(), out.begin());
      break;
    }
    case Pooling::kLastToken: {
      auto r = row(len - 1);
      std::copy(r.begin(), r.end(), out.begin());
      break;
    }
    case Pooling::kMax: {
      for (std::int64_t d = 0; d < dim; ++d) {
        float m = row(first)[d];
        for (std::int64_t t = first + 1; t < len; ++t) m = std::max(m, row(t)[d]);
        out[d] = m;
      }
      break;
    }
    case Pooling::kMean: {
      std::vector<double> sum(static_cast<std::size_t>(dim), 0.0);
      for (std::int64_t t = first; t < len; ++t) {
        auto r = row(t);
        for (std::int64_t d = 0; d < dim; ++d) sum[d] += r[d];
      }
      const double n = static_cast<double>(len - first);
      for (std::int64_t d = 0; d < dim; ++d) out[d] = static_cast<float>(sum[d] / n);
      break;
    }
  }
  return out;
}

Status Truncate(std::vector<float>& v, std::int64_t dimensions) {
  if (dimensions < 1 || dimensions > static_cast<std::int64_t>(v.size()))
    return InvalidArgument("dimensions " + std::to_string(dimensions) + " must be between 1 and the model's " +
                           std::to_string(v.size()))
        .WithParam("dimensions");
  v.resize(static_cast<std::size_t>(dimensions));
  return Status::Ok();
}

void Normalize(std::vector<float>& v) {
  double ss = 0;
  for (float x : v) ss += static_cast<double>(x) * x;
  const double norm = std::max(std::sqrt(ss), 1e-12);
  for (float& x : v) x = static_cast<float>(x / norm);
}

}  // namespace ropeserve::embedding

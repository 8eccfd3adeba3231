#include "server/checkpoint/model_config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <limits>

#include "server/common/json_file.h"
#include "server/common/json_reader.h"

namespace ropeserve {

using json = nlohmann::json;

const char* ModelFamilyName(ModelFamily f) {
  switch (f) {
    case ModelFamily::kLlama:
      return "llama";
    case ModelFamily::kQwen2:
      return "qwen2";
    case ModelFamily::kQwen3:
      return "qwen3";
  }
  return "?";
}

namespace {

StatusOr<RopeScaling> ParseRopeScaling(const json& obj, const std::string& where, std::int64_t max_pos) {
  JsonReader r(obj, where);
  RopeScaling s;
  if (r.Has("rope_type")) {
    RS_ASSIGN_OR_RETURN(s.type, r.String("rope_type"));
  } else if (r.Has("type")) {  // older configs
    RS_ASSIGN_OR_RETURN(s.type, r.String("type"));
  }
  if (s.type != "default" && s.type != "linear" && s.type != "dynamic" && s.type != "llama3" && s.type != "yarn")
    return Unimplemented(where + ": rope type '" + s.type +
                         "' is not supported (supported: default, linear, dynamic, llama3, yarn)");
  if (s.type == "default") return s;

  // yarn may derive its factor from the context ratio; the others need it.
  const bool factor_optional = s.type == "yarn" && r.Has("original_max_position_embeddings");
  RS_ASSIGN_OR_RETURN(auto orig, r.Int("original_max_position_embeddings", std::int64_t{0}));
  if (orig < 0) return InvalidArgument(where + ": original_max_position_embeddings must be positive");
  s.original_max_position_embeddings = orig;
  if (r.Has("factor") || !factor_optional) {
    RS_ASSIGN_OR_RETURN(s.factor, r.Double("factor"));
  } else {
    s.factor = static_cast<double>(max_pos) / static_cast<double>(orig);
  }
  if (!(s.factor > 0)) return InvalidArgument(where + ": rope scaling 'factor' must be > 0");

  if (s.type == "llama3") {
    RS_ASSIGN_OR_RETURN(s.low_freq_factor, r.Double("low_freq_factor"));
    RS_ASSIGN_OR_RETURN(s.high_freq_factor, r.Double("high_freq_factor"));
    if (s.original_max_position_embeddings == 0)
      return InvalidArgument(where + ": llama3 rope scaling needs 'original_max_position_embeddings'");
    if (!(s.high_freq_factor > s.low_freq_factor) || !(s.low_freq_factor > 0))
      return InvalidArgument(where + ": llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor");
  }
  if (s.type == "yarn") {
    if (r.Has("attention_factor")) {
      RS_ASSIGN_OR_RETURN(double af, r.Double("attention_factor"));
      if (!(af > 0)) return InvalidArgument(where + ": 'attention_factor' must be > 0");
      s.attention_factor = af;
    }
    // Hugging Face treats 0 / null as "use the default" (`get(...) or 32`).
    RS_ASSIGN_OR_RETURN(s.beta_fast, r.Double("beta_fast", 32.0));
    RS_ASSIGN_OR_RETURN(s.beta_slow, r.Double("beta_slow", 1.0));
    if (s.beta_fast == 0) s.beta_fast = 32.0;
    if (s.beta_slow == 0) s.beta_slow = 1.0;
    if (!(s.beta_fast > 0) || !(s.beta_slow > 0))
      return InvalidArgument(where + ": yarn beta_fast and beta_slow must be > 0");
    if (r.Has("mscale")) {
      RS_ASSIGN_OR_RETURN(double m, r.Double("mscale"));
      s.mscale = m;
    }
    if (r.Has("mscale_all_dim")) {
      RS_ASSIGN_OR_RETURN(double m, r.Double("mscale_all_dim"));
      s.mscale_all_dim = m;
    }
    RS_ASSIGN_OR_RETURN(s.truncate, r.Bool("truncate", true));
  }
  return s;
}

Status Positive(const std::string& where, const char* key, std::int64_t v) {
  if (v <= 0) return InvalidArgument(where + ": '" + key + "' must be positive, got " + std::to_string(v));
  return Status::Ok();
}

}  // namespace

std::int64_t ModelConfig::num_parameters() const {
  std::int64_t n = 0;
  for (const auto& t : ExpectedTensors(*this)) {
    std::int64_t m = 1;
    for (auto d : t.shape) m *= d;
    n += m;
  }
  return n;
}

namespace {

// "architectures"[0], else model_type; the family and head it names.
Status ReadArchitecture(const JsonReader<json>& r, ModelConfig& c) {
  const std::string& source = r.where();
  if (const json* architectures = r.Find("architectures")) {
    const json& a = *architectures;
    if (!a.is_array() || a.empty() || !a[0].is_string())
      return InvalidArgument(source + ": 'architectures' must be a non-empty list of strings");
    c.architecture = a[0].get<std::string>();
  } else if (r.Has("model_type")) {
    RS_ASSIGN_OR_RETURN(std::string mt, r.String("model_type"));
    if (mt == "llama")
      c.architecture = "LlamaForCausalLM";
    else if (mt == "mistral")
      c.architecture = "MistralForCausalLM";
    else if (mt == "qwen2")
      c.architecture = "Qwen2ForCausalLM";
    else if (mt == "qwen3")
      c.architecture = "Qwen3ForCausalLM";
    else
      c.architecture = mt;
  } else {
    return InvalidArgument(source + ": neither 'architectures' nor 'model_type' is given");
  }
  const std::string kQa = "ForQuestionAnswering";
  std::string base = c.architecture;
  if (base.size() > kQa.size() && base.compare(base.size() - kQa.size(), kQa.size(), kQa) == 0) {
    c.span_head = true;
    c.trunk_prefix = "transformer.";  // Hugging Face's base_model_prefix for these heads
    base = base.substr(0, base.size() - kQa.size()) + "ForCausalLM";
  } else if (const std::string kSeq = "ForSequenceClassification";
             base.size() > kSeq.size() && base.compare(base.size() - kSeq.size(), kSeq.size(), kSeq) == 0) {
    c.sequence_head = true;
    base = base.substr(0, base.size() - kSeq.size()) + "ForCausalLM";
  } else if (base == "LlamaModel" || base == "MistralModel" || base == "Qwen2Model" || base == "Qwen3Model") {
    c.base_model = true;
    c.trunk_prefix = "";  // a base model's own names (Checkpoint::Open also takes "model.")
    base = base.substr(0, base.size() - 5) + "ForCausalLM";
  }
  if (base == "LlamaForCausalLM" || base == "MistralForCausalLM") {
    c.family = ModelFamily::kLlama;
  } else if (base == "Qwen2ForCausalLM") {
    c.family = ModelFamily::kQwen2;
  } else if (base == "Qwen3ForCausalLM") {
    c.family = ModelFamily::kQwen3;
  } else {
    return Unimplemented(source + ": unknown architecture '" + c.architecture +
                         "' (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                         "and their ForQuestionAnswering and ForSequenceClassification heads)");
  }
  return Status::Ok();
}

// A sequence classifier's labels (or scored tokens: classifier_from_token).
Status ReadClassifierHead(const JsonReader<json>& r, ModelConfig& c) {
  const std::string& source = r.where();
  // The score matrix's rows (server/checkpoint/encoder_config.cc reads the labels).
  c.num_labels = 2;
  if (const json* labels = r.Find("id2label"); labels != nullptr && labels->is_object())
    c.num_labels = static_cast<std::int64_t>(labels->size());
  RS_ASSIGN_OR_RETURN(c.num_labels, r.Int("num_labels", c.num_labels));
  if (c.num_labels < 1 || c.num_labels > (1 << 16))
    return InvalidArgument(source + ": a classifier needs 1 to 65536 labels, got " + std::to_string(c.num_labels));
  if (const json* tokens = r.Find("classifier_from_token"); tokens != nullptr && !tokens->is_null()) {
    if (!tokens->is_array() || tokens->empty() || tokens->size() > (1u << 16))
      return InvalidArgument(source + ": 'classifier_from_token' must be a non-empty list of tokens");
    for (const json& t : *tokens) {
      if (!t.is_string() || t.get<std::string>().empty())
        return InvalidArgument(source + ": 'classifier_from_token' must be a non-empty list of tokens");
      c.classifier_from_token.push_back(t.get<std::string>());
    }
    RS_ASSIGN_OR_RETURN(c.original_qwen3_reranker, r.Bool("is_original_qwen3_reranker", false));
    if (c.original_qwen3_reranker && c.classifier_from_token.size() != 2)
      return InvalidArgument(source +
                             ": is_original_qwen3_reranker scores two tokens ([\"no\", \"yes\"]), "
                             "'classifier_from_token' has " +
                             std::to_string(c.classifier_from_token.size()));
    c.num_labels = c.original_qwen3_reranker ? 1 : static_cast<std::int64_t>(c.classifier_from_token.size());
  }
  return Status::Ok();
}

// 4-bit weights (quantization_config): every projection of the decoder, of
// shapes its checkpoint can hold.
Status ReadInt4Weights(const json& qc, const std::string& source, ModelConfig& c) {
  RS_ASSIGN_OR_RETURN(Int4Checkpoint q, ParseInt4Checkpoint(qc, source + " quantization_config"));
  if (c.span_head || c.sequence_head)
    return Unimplemented(source + ": a span (QA) model or classifier with 4-bit weights is not supported");
  const std::int64_t H = c.hidden_size, I = c.intermediate_size;
  const std::pair<const char*, std::pair<std::int64_t, std::int64_t>> projections[] = {
      {"self_attn.q_proj", {c.q_size(), H}},
      {"self_attn.k_proj", {c.kv_size(), H}},
      {"self_attn.v_proj", {c.kv_size(), H}},
      {"self_attn.o_proj", {H, c.q_size()}},
      {"mlp.gate_proj", {I, H}},
      {"mlp.up_proj", {I, H}},
      {"mlp.down_proj", {H, I}}};
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (const auto& [name, nk] : projections) {
      const std::string module = c.trunk_prefix + "layers." + std::to_string(l) + "." + name;
      if (l == 0) RS_RETURN_IF_ERROR(CheckInt4Projection(q, module, nk.first, nk.second));
      if (Int4ModuleNotConverted(q, module))
        return Unimplemented(source + ": quantization_config leaves " + module +
                             " in floating point: a decoder with some projections 4-bit and others not is not "
                             "supported");
    }
  }
  c.int4_weights = std::move(q);
  return Status::Ok();
}

StatusOr<ModelConfig> ParseModelConfigObject(const json& j, const std::string& source) {
  JsonReader r(j, source);
  ModelConfig c;

  RS_RETURN_IF_ERROR(ReadArchitecture(r, c));

  RS_ASSIGN_OR_RETURN(c.vocab_size, r.Int("vocab_size"));
  RS_ASSIGN_OR_RETURN(c.hidden_size, r.Int("hidden_size"));
  RS_ASSIGN_OR_RETURN(c.intermediate_size, r.Int("intermediate_size"));
  RS_ASSIGN_OR_RETURN(c.num_hidden_layers, r.Int("num_hidden_layers"));
  RS_ASSIGN_OR_RETURN(c.num_attention_heads, r.Int("num_attention_heads"));
  RS_ASSIGN_OR_RETURN(c.num_key_value_heads, r.Int("num_key_value_heads", c.num_attention_heads));
  RS_ASSIGN_OR_RETURN(c.max_position_embeddings, r.Int("max_position_embeddings", std::int64_t{2048}));
  for (auto [key, v] : {std::pair{"vocab_size", c.vocab_size},
                        {"hidden_size", c.hidden_size},
                        {"intermediate_size", c.intermediate_size},
                        {"num_hidden_layers", c.num_hidden_layers},
                        {"num_attention_heads", c.num_attention_heads},
                        {"num_key_value_heads", c.num_key_value_heads},
                        {"max_position_embeddings", c.max_position_embeddings}})
    RS_RETURN_IF_ERROR(Positive(source, key, v));
  // Bounds that keep products far from overflow and reject nonsense early.
  if (c.hidden_size > (1 << 20) || c.intermediate_size > (1 << 22) || c.vocab_size > (1 << 24) ||
      c.num_hidden_layers > 4096 || c.num_attention_heads > 4096 || c.max_position_embeddings > (1LL << 32))
    return InvalidArgument(source + ": a dimension is implausibly large");

  if (r.Has("head_dim")) {
    RS_ASSIGN_OR_RETURN(c.head_dim, r.Int("head_dim"));
    RS_RETURN_IF_ERROR(Positive(source, "head_dim", c.head_dim));
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      return InvalidArgument(source + ": num_attention_heads (" + std::to_string(c.num_attention_heads) +
                             ") does not divide hidden_size (" + std::to_string(c.hidden_size) +
                             ") and no head_dim is given");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return InvalidArgument(source + ": num_key_value_heads (" + std::to_string(c.num_key_value_heads) +
                           ") does not divide num_attention_heads (" + std::to_string(c.num_attention_heads) + ")");

  RS_ASSIGN_OR_RETURN(c.rms_norm_eps, r.Double("rms_norm_eps", 1e-6));
  if (!(c.rms_norm_eps > 0)) return InvalidArgument(source + ": 'rms_norm_eps' must be > 0");

  // RoPE: legacy top-level rope_theta/rope_scaling, or transformers 5's rope_parameters.
  const json* rope_obj = nullptr;
  if (r.Has("rope_parameters"))
    rope_obj = &j.at("rope_parameters");
  else if (r.Has("rope_scaling"))
    rope_obj = &j.at("rope_scaling");
  if (rope_obj != nullptr && !rope_obj->is_object())
    return InvalidArgument(source + ": rope_scaling / rope_parameters must be an object or null");
  RS_ASSIGN_OR_RETURN(c.rope_theta, r.Double("rope_theta", 10000.0));
  RS_ASSIGN_OR_RETURN(c.partial_rotary_factor, r.Double("partial_rotary_factor", 1.0));
  if (rope_obj != nullptr) {
    JsonReader rr(*rope_obj, source + " rope parameters");
    RS_ASSIGN_OR_RETURN(c.rope_theta, rr.Double("rope_theta", c.rope_theta));
    RS_ASSIGN_OR_RETURN(c.partial_rotary_factor, rr.Double("partial_rotary_factor", c.partial_rotary_factor));
    RS_ASSIGN_OR_RETURN(c.rope_scaling, ParseRopeScaling(*rope_obj, rr.where(), c.max_position_embeddings));
  }
  if (!(c.rope_theta > 1.0)) return InvalidArgument(source + ": 'rope_theta' must be > 1");
  if (!(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1.0))
    return InvalidArgument(source + ": 'partial_rotary_factor' must be in (0, 1]");
  if (c.rotary_dim() < 2 || c.rotary_dim() % 2 != 0)
    return InvalidArgument(source + ": rotary dimension head_dim * partial_rotary_factor = " +
                           std::to_string(c.rotary_dim()) + " must be even and at least 2");
  if (c.rope_scaling.original_max_position_embeddings == 0)
    c.rope_scaling.original_max_position_embeddings = c.max_position_embeddings;

  RS_ASSIGN_OR_RETURN(std::string act, r.String("hidden_act", std::string("silu")));
  if (act != "silu") return Unimplemented(source + ": hidden_act '" + act + "' is not supported (only silu)");

  RS_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));
  RS_ASSIGN_OR_RETURN(bool attention_bias, r.Bool("attention_bias", false));
  RS_ASSIGN_OR_RETURN(c.mlp_bias, r.Bool("mlp_bias", false));
  switch (c.family) {
    case ModelFamily::kLlama:
      c.qkv_bias = c.o_proj_bias = attention_bias;
      break;
    case ModelFamily::kQwen2:  // q/k/v always carry a bias, o_proj never
      c.qkv_bias = true;
      c.o_proj_bias = false;
      c.mlp_bias = false;
      break;
    case ModelFamily::kQwen3:
      c.qkv_bias = c.o_proj_bias = attention_bias;
      c.qk_norm = true;
      c.mlp_bias = false;
      break;
  }

  // Sliding-window attention is not implemented: accept it only where it can
  // never take effect (the window covers the whole context).
  bool sliding = c.architecture.rfind("Mistral", 0) == 0;
  if (c.family != ModelFamily::kLlama) {
    RS_ASSIGN_OR_RETURN(sliding, r.Bool("use_sliding_window", false));
  }
  if (sliding && r.Has("sliding_window")) {
    RS_ASSIGN_OR_RETURN(std::int64_t window, r.Int("sliding_window"));
    if (window < c.max_position_embeddings)
      return Unimplemented(source + ": sliding_window " + std::to_string(window) +
                           " < max_position_embeddings is not supported yet");
  }

  // transformers 5 writes "dtype", older versions "torch_dtype".
  RS_ASSIGN_OR_RETURN(c.torch_dtype, r.String(r.Has("dtype") ? "dtype" : "torch_dtype", std::string()));
  if (r.Has("bos_token_id")) {
    RS_ASSIGN_OR_RETURN(std::int64_t bos, r.Int("bos_token_id"));
    c.bos_token_id = bos;
  }
  RS_ASSIGN_OR_RETURN(c.eos_token_ids, r.IntOrList("eos_token_id"));
  for (auto id : c.eos_token_ids)
    if (id < 0 || id >= c.vocab_size)
      return InvalidArgument(source + ": eos_token_id " + std::to_string(id) + " is outside the vocabulary");
  if (c.sequence_head) RS_RETURN_IF_ERROR(ReadClassifierHead(r, c));
  if (const json* qc = r.Find("quantization_config")) RS_RETURN_IF_ERROR(ReadInt4Weights(*qc, source, c));
  return c;
}

}  // namespace

StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& source) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(source + ": malformed JSON");
  if (!j.is_object()) return InvalidArgument(source + ": top level is not a JSON object");
  return ParseModelConfigObject(j, source);
}

StatusOr<ModelConfig> LoadModelConfig(const std::string& dir) {
  const std::string path = dir + "/config.json";
  RS_ASSIGN_OR_RETURN(json j, ReadJsonObjectFile(path));
  RS_ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfigObject(j, path));

  const std::string gen_path = dir + "/generation_config.json";
  std::error_code ec;
  if (std::filesystem::exists(gen_path, ec)) {
    RS_ASSIGN_OR_RETURN(json g, ReadJsonObjectFile(gen_path));
    JsonReader r(g, gen_path);
    RS_ASSIGN_OR_RETURN(auto eos, r.IntOrList("eos_token_id"));
    for (auto id : eos)
      if (id < 0 || id >= c.vocab_size)
        return InvalidArgument(gen_path + ": eos_token_id " + std::to_string(id) + " is outside the vocabulary");
    if (!eos.empty()) c.eos_token_ids = eos;
    if (r.Has("bos_token_id")) {
      RS_ASSIGN_OR_RETURN(std::int64_t bos, r.Int("bos_token_id"));
      c.bos_token_id = bos;
    }
  }
  return c;
}

std::vector<TensorSpec> ExpectedTensors(const ModelConfig& c) {
  std::vector<TensorSpec> t;
  const std::int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const std::string& trunk = c.trunk_prefix;
  // A projection's weight [n, k], in floating point or as its 4-bit format stores it.
  auto weight = [&](const std::string& module, std::int64_t n, std::int64_t k) {
    if (!c.int4_weights) {
      t.push_back({module + ".weight", {n, k}});
      return;
    }
    for (auto& spec : Int4TensorSpecs(*c.int4_weights, module, n, k)) t.push_back(std::move(spec));
  };
  t.push_back({trunk + "embed_tokens.weight", {c.vocab_size, H}});
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = trunk + "layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {H}});
    weight(p + "self_attn.q_proj", c.q_size(), H);
    weight(p + "self_attn.k_proj", c.kv_size(), H);
    weight(p + "self_attn.v_proj", c.kv_size(), H);
    if (c.qkv_bias) {
      t.push_back({p + "self_attn.q_proj.bias", {c.q_size()}});
      t.push_back({p + "self_attn.k_proj.bias", {c.kv_size()}});
      t.push_back({p + "self_attn.v_proj.bias", {c.kv_size()}});
    }
    if (c.qk_norm) {
      t.push_back({p + "self_attn.q_norm.weight", {D}});
      t.push_back({p + "self_attn.k_norm.weight", {D}});
    }
    weight(p + "self_attn.o_proj", H, c.q_size());
    if (c.o_proj_bias) t.push_back({p + "self_attn.o_proj.bias", {H}});
    t.push_back({p + "post_attention_layernorm.weight", {H}});
    weight(p + "mlp.gate_proj", I, H);
    weight(p + "mlp.up_proj", I, H);
    weight(p + "mlp.down_proj", H, I);
    if (c.mlp_bias) {
      t.push_back({p + "mlp.gate_proj.bias", {I}});
      t.push_back({p + "mlp.up_proj.bias", {I}});
      t.push_back({p + "mlp.down_proj.bias", {H}});
    }
  }
  t.push_back({trunk + "norm.weight", {H}});
  if (c.span_head) {
    t.push_back({"qa_outputs.weight", {2, H}});
    t.push_back({"qa_outputs.bias", {2}});
  } else if (c.sequence_head && !c.classifier_from_token.empty()) {
    if (!c.tie_word_embeddings) t.push_back({"lm_head.weight", {c.vocab_size, H}});  // score is built from it
  } else if (c.sequence_head) {
    t.push_back({"score.weight", {c.num_labels, H}});
  } else if (!c.tie_word_embeddings && !c.base_model) {
    t.push_back({"lm_head.weight", {c.vocab_size, H}});
  }
  return t;
}

bool IsIgnorableTensor(const std::string& name, const ModelConfig& c) {
  auto ends_with = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with("rotary_emb.inv_freq")) return true;
  // Tied checkpoints sometimes still carry lm_head.weight; Hugging Face
  // ignores it in favour of the embeddings, and so do we.
  if ((c.tie_word_embeddings || c.base_model) && name == "lm_head.weight") return true;
  if (c.int4_weights && ends_with("_proj.bias")) return true;
  return false;
}

}  // namespace ropeserve

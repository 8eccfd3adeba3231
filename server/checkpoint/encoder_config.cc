#include "server/checkpoint/encoder_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "server/common/json_reader.h"

namespace ropeserve {

namespace {

using json = nlohmann::json;

const std::set<std::string> kActivations = {"gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_python", "relu", "silu"};

Status CheckActivation(const std::string& where, const char* key, const std::string& act) {
  if (kActivations.count(act) == 0) return Unimplemented(where + ": unsupported " + key + " '" + act + "'");
  return Status::Ok();
}

// rope_parameters of one attention kind: "default" only, its rope_theta.
StatusOr<std::optional<double>> RopeTheta(const json& j, const char* kind, const std::string& where) {
  if (!j.contains("rope_parameters") || !j["rope_parameters"].is_object()) return std::optional<double>();
  const json& all = j["rope_parameters"];
  if (!all.contains(kind) || all[kind].is_null()) return std::optional<double>();
  if (!all[kind].is_object()) return InvalidArgument(where + ": rope_parameters." + kind + " must be an object");
  JsonReader r(all[kind], where + " rope_parameters." + kind);
  RS_ASSIGN_OR_RETURN(std::string type, r.String("rope_type", std::string("default")));
  if (type != "default") return Unimplemented(where + ": rope type '" + type + "' for an encoder");
  if (!r.Has("rope_theta")) return std::optional<double>();
  RS_ASSIGN_OR_RETURN(double theta, r.Double("rope_theta"));
  return std::optional<double>(theta);
}

Status Positive(const std::string& where, const char* key, std::int64_t v) {
  if (v <= 0) return InvalidArgument(where + ": '" + key + "' must be positive, got " + std::to_string(v));
  return Status::Ok();
}

Status ParseModernBert(const json& j, const std::string& where, EncoderConfig& c) {
  JsonReader r(j, where);
  RS_ASSIGN_OR_RETURN(c.vocab_size, r.Int("vocab_size", 50368));
  RS_ASSIGN_OR_RETURN(c.hidden_size, r.Int("hidden_size", 768));
  RS_ASSIGN_OR_RETURN(c.intermediate_size, r.Int("intermediate_size", 1152));
  RS_ASSIGN_OR_RETURN(c.num_hidden_layers, r.Int("num_hidden_layers", 22));
  RS_ASSIGN_OR_RETURN(c.num_attention_heads, r.Int("num_attention_heads", 12));
  RS_ASSIGN_OR_RETURN(c.max_position_embeddings, r.Int("max_position_embeddings", 8192));
  RS_ASSIGN_OR_RETURN(c.activation, r.String("hidden_activation", std::string("gelu")));
  RS_RETURN_IF_ERROR(CheckActivation(where, "hidden_activation", c.activation));
  RS_ASSIGN_OR_RETURN(c.norm_eps, r.Double("norm_eps", 1e-5));
  RS_ASSIGN_OR_RETURN(c.norm_bias, r.Bool("norm_bias", false));
  RS_ASSIGN_OR_RETURN(c.attention_bias, r.Bool("attention_bias", false));
  RS_ASSIGN_OR_RETURN(c.mlp_bias, r.Bool("mlp_bias", false));
  RS_ASSIGN_OR_RETURN(c.classifier_bias, r.Bool("classifier_bias", false));
  RS_ASSIGN_OR_RETURN(c.classifier_activation, r.String("classifier_activation", std::string("gelu")));
  RS_RETURN_IF_ERROR(CheckActivation(where, "classifier_activation", c.classifier_activation));
  RS_ASSIGN_OR_RETURN(c.local_attention, r.Int("local_attention", 128));
  RS_RETURN_IF_ERROR(Positive(where, "local_attention", c.local_attention));
  if (c.local_attention % 2 != 0) return InvalidArgument(where + ": 'local_attention' must be even (a total window)");
  RS_RETURN_IF_ERROR(Positive(where, "num_hidden_layers", c.num_hidden_layers));
  // Layer kinds: layer_types, or every global_attn_every_n_layers-th layer global.
  if (r.Has("layer_types")) {
    const json& lt = j["layer_types"];
    if (!lt.is_array() || static_cast<std::int64_t>(lt.size()) != c.num_hidden_layers)
      return InvalidArgument(where + ": 'layer_types' must list one kind per layer");
    for (const auto& t : lt) {
      if (t == "full_attention") {
        c.global_layers.push_back(true);
      } else if (t == "sliding_attention") {
        c.global_layers.push_back(false);
      } else {
        return InvalidArgument(where + ": unknown layer type " + t.dump());
      }
    }
  } else {
    RS_ASSIGN_OR_RETURN(std::int64_t every, r.Int("global_attn_every_n_layers", 3));
    RS_RETURN_IF_ERROR(Positive(where, "global_attn_every_n_layers", every));
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) c.global_layers.push_back(i % every == 0);
  }
  // RoPE bases: rope_parameters (new configs) or global/local_rope_theta.
  RS_ASSIGN_OR_RETURN(auto full, RopeTheta(j, "full_attention", where));
  RS_ASSIGN_OR_RETURN(auto sliding, RopeTheta(j, "sliding_attention", where));
  RS_ASSIGN_OR_RETURN(double global_theta, r.Double("global_rope_theta", 160000.0));
  RS_ASSIGN_OR_RETURN(double local_theta, r.Double("local_rope_theta", 10000.0));
  c.global_rope_theta = full.value_or(global_theta);
  c.local_rope_theta = sliding.value_or(local_theta);
  if (r.Has("rope_scaling")) return Unimplemented(where + ": rope_scaling on an encoder");
  if (!(c.global_rope_theta > 0) || !(c.local_rope_theta > 0))
    return InvalidArgument(where + ": RoPE bases must be positive");
  RS_ASSIGN_OR_RETURN(auto cls, r.Int("cls_token_id", 50281));
  RS_ASSIGN_OR_RETURN(auto sep, r.Int("sep_token_id", 50282));
  RS_ASSIGN_OR_RETURN(auto pad, r.Int("pad_token_id", 50283));
  c.cls_token_id = cls;
  c.sep_token_id = sep;
  c.pad_token_id = pad;
  return Status::Ok();
}

Status ParseRoFormer(const json& j, const std::string& where, EncoderConfig& c) {
  JsonReader r(j, where);
  RS_ASSIGN_OR_RETURN(c.vocab_size, r.Int("vocab_size", 50000));
  RS_ASSIGN_OR_RETURN(c.hidden_size, r.Int("hidden_size", 768));
  RS_ASSIGN_OR_RETURN(c.embedding_size, r.Int("embedding_size", c.hidden_size));
  RS_ASSIGN_OR_RETURN(c.intermediate_size, r.Int("intermediate_size", 3072));
  RS_ASSIGN_OR_RETURN(c.num_hidden_layers, r.Int("num_hidden_layers", 12));
  RS_ASSIGN_OR_RETURN(c.num_attention_heads, r.Int("num_attention_heads", 12));
  RS_ASSIGN_OR_RETURN(c.max_position_embeddings, r.Int("max_position_embeddings", 1536));
  RS_ASSIGN_OR_RETURN(c.type_vocab_size, r.Int("type_vocab_size", 2));
  RS_ASSIGN_OR_RETURN(c.activation, r.String("hidden_act", std::string("gelu")));
  RS_RETURN_IF_ERROR(CheckActivation(where, "hidden_act", c.activation));
  RS_ASSIGN_OR_RETURN(c.norm_eps, r.Double("layer_norm_eps", 1e-12));
  RS_ASSIGN_OR_RETURN(c.rotary_value, r.Bool("rotary_value", false));
  RS_RETURN_IF_ERROR(Positive(where, "embedding_size", c.embedding_size));
  RS_RETURN_IF_ERROR(Positive(where, "type_vocab_size", c.type_vocab_size));
  c.global_layers.assign(static_cast<std::size_t>(std::max<std::int64_t>(c.num_hidden_layers, 0)), true);
  RS_ASSIGN_OR_RETURN(auto pad, r.Int("pad_token_id", 0));
  c.pad_token_id = pad;
  return Status::Ok();
}

// The head an architecture name declares ("ModernBertForTokenClassification"
// -> kToken), and the family's name before the suffix.
std::pair<std::string, std::optional<EncoderHead>> SplitArchitecture(const std::string& arch) {
  const std::pair<const char*, EncoderHead> suffixes[] = {{"ForQuestionAnswering", EncoderHead::kSpan},
                                                          {"ForSequenceClassification", EncoderHead::kSequence},
                                                          {"ForTokenClassification", EncoderHead::kToken},
                                                          {"Model", EncoderHead::kNone}};
  for (const auto& [suffix, head] : suffixes) {
    const std::string s = suffix;
    if (arch.size() > s.size() && arch.compare(arch.size() - s.size(), s.size(), s) == 0)
      return {arch.substr(0, arch.size() - s.size()), head};
  }
  return {arch, std::nullopt};
}

// torch.nn.modules' activation classes sentence-transformers' CrossEncoder
// saves by qualified name (vLLM loads only those).
StatusOr<ScoreActivation> CrossEncoderActivation(const std::string& name, const std::string& where) {
  const std::string kPrefix = "torch.nn.modules.";
  const std::string last = name.substr(name.rfind('.') == std::string::npos ? 0 : name.rfind('.') + 1);
  if (name.rfind(kPrefix, 0) == 0) {
    if (last == "Sigmoid") return ScoreActivation::kSigmoid;
    if (last == "Identity") return ScoreActivation::kIdentity;
    if (last == "Softmax") return ScoreActivation::kSoftmax;
  }
  return Unimplemented(where + ": activation_fn '" + name.substr(0, 100) +
                       "' (supported: torch.nn.modules' Sigmoid, Softmax, Identity)");
}

// A classifier's labels (id2label, num_labels), and its activations.
Status ParseClassifier(const json& j, const std::string& source, EncoderConfig& c) {
  JsonReader r(j, source);
  std::map<std::int64_t, std::string> named;
  if (r.Has("id2label")) {
    if (!j["id2label"].is_object()) return InvalidArgument(source + ": 'id2label' must be an object");
    for (const auto& [key, value] : j["id2label"].items()) {
      std::size_t used = 0;
      long long index = -1;
      try {
        index = std::stoll(key, &used);
      } catch (const std::exception&) {
      }
      if (used != key.size() || index < 0 || !value.is_string())
        return InvalidArgument(source + ": 'id2label' maps label indices (\"0\", \"1\", ...) to names, got " +
                               ShowJson(json{{key, value}}));
      named[index] = value.get<std::string>();
    }
    c.num_labels = static_cast<std::int64_t>(named.size());
  }
  RS_ASSIGN_OR_RETURN(c.num_labels, r.Int("num_labels", c.num_labels));
  if (c.num_labels < 1 || c.num_labels > (1 << 16))
    return InvalidArgument(source + ": a classifier needs 1 to 65536 labels, got " + std::to_string(c.num_labels));
  if (!named.empty() &&
      (static_cast<std::int64_t>(named.size()) != c.num_labels || named.rbegin()->first >= c.num_labels))
    return InvalidArgument(source + ": 'id2label' does not name labels 0.." + std::to_string(c.num_labels - 1));
  c.labels.clear();
  for (std::int64_t i = 0; i < c.num_labels; ++i)
    c.labels.push_back(named.count(i) ? named[i] : "LABEL_" + std::to_string(i));
  RS_ASSIGN_OR_RETURN(std::string problem, r.String("problem_type", std::string()));
  const ScoreActivation by_labels = c.num_labels < 2 ? ScoreActivation::kSigmoid : ScoreActivation::kSoftmax;
  if (problem == "regression") {
    c.classify_activation = ScoreActivation::kIdentity;
  } else if (problem == "multi_label_classification") {
    c.classify_activation = ScoreActivation::kSigmoid;
  } else if (problem.empty() || problem == "single_label_classification") {
    c.classify_activation = by_labels;
  } else {
    return InvalidArgument(source + ": unknown problem_type '" + problem.substr(0, 100) + "'");
  }
  c.score_activation = by_labels;
  std::optional<std::string> fn;
  if (const json* st = r.Find("sentence_transformers"); st != nullptr && st->is_object()) {
    JsonReader sr(*st, source + " sentence_transformers");
    RS_ASSIGN_OR_RETURN(std::string name, sr.String("activation_fn", std::string()));
    if (!name.empty()) fn = name;
  }
  if (!fn) {
    RS_ASSIGN_OR_RETURN(std::string name, r.String("sbert_ce_default_activation_function", std::string()));
    if (!name.empty()) fn = name;
  }
  if (fn) {
    RS_ASSIGN_OR_RETURN(c.score_activation, CrossEncoderActivation(*fn, source));
    // Sigmoid and Softmax modules act as vLLM's classify activation (by the label count).
    if (c.score_activation != ScoreActivation::kIdentity) c.score_activation = by_labels;
  }
  if (c.family == EncoderFamily::kModernBert) {
    RS_ASSIGN_OR_RETURN(c.classifier_pooling, r.String("classifier_pooling", std::string("cls")));
    if (c.classifier_pooling != "cls" && c.classifier_pooling != "mean")
      return InvalidArgument(source + ": 'classifier_pooling' must be cls or mean, got '" +
                             c.classifier_pooling.substr(0, 100) + "'");
  }
  return Status::Ok();
}

}  // namespace

const char* ScoreActivationName(ScoreActivation a) {
  switch (a) {
    case ScoreActivation::kSoftmax:
      return "softmax";
    case ScoreActivation::kSigmoid:
      return "sigmoid";
    case ScoreActivation::kIdentity:
      break;
  }
  return "identity";
}

void ApplyScoreActivation(ScoreActivation a, std::vector<float>& logits) {
  if (a == ScoreActivation::kSigmoid) {
    for (float& x : logits) x = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
  } else if (a == ScoreActivation::kSoftmax && !logits.empty()) {
    const double top = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float x : logits) sum += std::exp(static_cast<double>(x) - top);
    for (float& x : logits) x = static_cast<float>(std::exp(static_cast<double>(x) - top) / sum);
  }
}

StatusOr<EncoderConfig> ParseEncoderConfig(const std::string& json_text, const std::string& source) {
  json j = json::parse(json_text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(source + ": not a JSON object");
  EncoderConfig c;
  if (!j.contains("architectures") || !j["architectures"].is_array() || j["architectures"].empty() ||
      !j["architectures"][0].is_string()) {
    return InvalidArgument(source + ": 'architectures' must name the model class");
  }
  c.architecture = j["architectures"][0].get<std::string>();
  if (j.contains("quantization_config") && !j["quantization_config"].is_null())
    return Unimplemented(source +
                         ": 'quantization_config': 4-bit weights are supported for causal decoders only, "
                         "not for span (QA) models");
  const auto [family, head] = SplitArchitecture(c.architecture);
  if ((family == "ModernBert" || family == "RoFormer") && head) {
    c.head = *head;
    if (family == "ModernBert") {
      c.family = EncoderFamily::kModernBert;
      RS_RETURN_IF_ERROR(ParseModernBert(j, source, c));
    } else {
      c.family = EncoderFamily::kRoFormer;
      RS_RETURN_IF_ERROR(ParseRoFormer(j, source, c));
    }
  } else if (auto trunk = ParseModelConfig(json_text, source); trunk.ok()) {
    // A span head or a classifier on a causal trunk; or the trunk alone
    // (LlamaModel & co., or a causal LM used as a sentence embedder, lm_head
    // ignored).
    ModelConfig m = *trunk;
    if (!m.span_head && !m.sequence_head) m.base_model = true;
    if (m.int4_weights) return Unimplemented(source + ": a 4-bit decoder as an encoder is not supported");
    c.family = EncoderFamily::kDecoder;
    c.head = m.span_head ? EncoderHead::kSpan : m.sequence_head ? EncoderHead::kSequence : EncoderHead::kNone;
    c.vocab_size = m.vocab_size;
    c.hidden_size = c.embedding_size = m.hidden_size;
    c.intermediate_size = m.intermediate_size;
    c.num_hidden_layers = m.num_hidden_layers;
    c.num_attention_heads = m.num_attention_heads;
    c.head_dim = m.head_dim;
    c.max_position_embeddings = m.max_position_embeddings;
    c.norm_eps = m.rms_norm_eps;
    c.activation = "silu";
    if (m.sequence_head && !m.classifier_from_token.empty()) {
      // Labels named after their tokens (the original Qwen3-Reranker's one
      // label after "yes"), as many as ModelConfig decided.
      json named = j;
      named["num_labels"] = m.num_labels;
      named["id2label"] = json::object();
      for (std::int64_t i = 0; i < m.num_labels; ++i)
        named["id2label"][std::to_string(i)] =
            m.classifier_from_token[static_cast<std::size_t>(m.original_qwen3_reranker ? 1 : i)];
      RS_RETURN_IF_ERROR(ParseClassifier(named, source, c));
    } else if (m.sequence_head) {
      RS_RETURN_IF_ERROR(ParseClassifier(j, source, c));
    }
    c.trunk = m;
    return c;
  } else if (!trunk.ok() && trunk.status().code() != ErrorCode::kUnimplemented) {
    return trunk.status();  // a decoder head with a bad config
  } else {
    return Unimplemented(source + ": architecture '" + c.architecture +
                         "' is not a supported encoder (ModernBert and RoFormer: ForQuestionAnswering, "
                         "ForSequenceClassification, ForTokenClassification, Model; Llama/Mistral/Qwen2/Qwen3: "
                         "ForQuestionAnswering, ForSequenceClassification, Model, ForCausalLM)");
  }
  for (auto [key, v] : {std::pair<const char*, std::int64_t>{"vocab_size", c.vocab_size},
                        {"hidden_size", c.hidden_size},
                        {"intermediate_size", c.intermediate_size},
                        {"num_hidden_layers", c.num_hidden_layers},
                        {"num_attention_heads", c.num_attention_heads},
                        {"max_position_embeddings", c.max_position_embeddings}}) {
    RS_RETURN_IF_ERROR(Positive(source, key, v));
  }
  if (c.hidden_size % c.num_attention_heads != 0)
    return InvalidArgument(source + ": hidden_size " + std::to_string(c.hidden_size) +
                           " is not a multiple of num_attention_heads " + std::to_string(c.num_attention_heads));
  c.head_dim = c.hidden_size / c.num_attention_heads;
  if (c.head_dim % 2 != 0) return InvalidArgument(source + ": the head dimension must be even for RoPE");
  if (!(c.norm_eps > 0)) return InvalidArgument(source + ": the norm epsilon must be positive");
  if (c.head == EncoderHead::kNone) return c;  // no head: labels do not apply
  if (c.head != EncoderHead::kSpan) {
    RS_RETURN_IF_ERROR(ParseClassifier(j, source, c));
    return c;
  }
  // A span head has two labels (start, end): num_labels or id2label.
  JsonReader r(j, source);
  if (r.Has("id2label")) {
    if (!j["id2label"].is_object()) return InvalidArgument(source + ": 'id2label' must be an object");
    c.num_labels = static_cast<std::int64_t>(j["id2label"].size());
  }
  RS_ASSIGN_OR_RETURN(c.num_labels, r.Int("num_labels", c.num_labels));
  if (c.num_labels != 2)
    return InvalidArgument(source + ": a question-answering head has 2 labels (start, end), got " +
                           std::to_string(c.num_labels));
  return c;
}

namespace {

std::vector<TensorSpec> RoFormerTensors(const EncoderConfig& c) {
  std::vector<TensorSpec> t;
  const std::int64_t h = c.hidden_size, e = c.embedding_size;
  auto linear = [&](const std::string& name, std::int64_t out, std::int64_t in) {
    t.push_back({name + ".weight", {out, in}});
    t.push_back({name + ".bias", {out}});
  };
  auto norm = [&](const std::string& name, std::int64_t n) {
    t.push_back({name + ".weight", {n}});
    t.push_back({name + ".bias", {n}});
  };
  t.push_back({"roformer.embeddings.word_embeddings.weight", {c.vocab_size, e}});
  t.push_back({"roformer.embeddings.token_type_embeddings.weight", {c.type_vocab_size, e}});
  norm("roformer.embeddings.LayerNorm", e);
  if (e != h) linear("roformer.embeddings_project", h, e);
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "roformer.encoder.layer." + std::to_string(i) + ".";
    linear(p + "attention.self.query", h, h);
    linear(p + "attention.self.key", h, h);
    linear(p + "attention.self.value", h, h);
    linear(p + "attention.output.dense", h, h);
    norm(p + "attention.output.LayerNorm", h);
    linear(p + "intermediate.dense", c.intermediate_size, h);
    linear(p + "output.dense", h, c.intermediate_size);
    norm(p + "output.LayerNorm", h);
  }
  switch (c.head) {
    case EncoderHead::kSpan:
      linear("qa_outputs", c.num_labels, h);
      break;
    case EncoderHead::kSequence:  // RoFormerClassificationHead
      linear("classifier.dense", h, h);
      linear("classifier.out_proj", c.num_labels, h);
      break;
    case EncoderHead::kToken:
      linear("classifier", c.num_labels, h);
      break;
    case EncoderHead::kNone:
      break;
  }
  return t;
}

}  // namespace

std::vector<TensorSpec> ExpectedEncoderTensors(const EncoderConfig& c) {
  if (c.family == EncoderFamily::kRoFormer) return RoFormerTensors(c);
  if (c.family == EncoderFamily::kDecoder) return ExpectedTensors(*c.trunk);
  std::vector<TensorSpec> t;
  const std::int64_t h = c.hidden_size;
  auto norm = [&](const std::string& name) {
    t.push_back({name + ".weight", {h}});
    if (c.norm_bias) t.push_back({name + ".bias", {h}});
  };
  auto linear = [&](const std::string& name, std::int64_t out, std::int64_t in, bool bias) {
    t.push_back({name + ".weight", {out, in}});
    if (bias) t.push_back({name + ".bias", {out}});
  };
  t.push_back({"model.embeddings.tok_embeddings.weight", {c.vocab_size, h}});
  norm("model.embeddings.norm");
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    if (i > 0) norm(p + "attn_norm");
    linear(p + "attn.Wqkv", 3 * h, h, c.attention_bias);
    linear(p + "attn.Wo", h, h, c.attention_bias);
    norm(p + "mlp_norm");
    linear(p + "mlp.Wi", 2 * c.intermediate_size, h, c.mlp_bias);
    linear(p + "mlp.Wo", h, c.intermediate_size, c.mlp_bias);
  }
  norm("model.final_norm");
  if (c.head == EncoderHead::kNone) return t;
  linear("head.dense", h, h, c.classifier_bias);
  norm("head.norm");
  linear("classifier", c.num_labels, h, true);
  return t;
}

std::string BaseModelPrefix(EncoderFamily family) {
  switch (family) {
    case EncoderFamily::kModernBert:
      return "model.";
    case EncoderFamily::kRoFormer:
      return "roformer.";
    case EncoderFamily::kDecoder:
      break;
  }
  return "model.";
}

}  // namespace ropeserve

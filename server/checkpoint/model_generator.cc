#include "server/checkpoint/model_generator.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "server/checkpoint/encoder_config.h"
#include "server/checkpoint/int4_writer.h"
#include "server/checkpoint/model_config.h"
#include "server/checkpoint/safetensors.h"
#include "server/embedding/pooling.h"

namespace ropeserve {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

struct Preset {
  const char* name;
  const char* arch;
  std::int64_t hidden, intermediate, layers, heads, kv_heads, head_dim /*0 = derived*/, vocab, max_pos;
  double rope_theta, rms_eps;
  bool tied;
  DType dtype;
  const char* rope_scaling;  // JSON or nullptr
};

// Shapes of the real models, for benchmarks; "tiny" for tests and the demo.
constexpr Preset kPresets[] = {
    {"tiny", "llama", 64, 172, 2, 4, 2, 0, 1024, 2048, 10000.0, 1e-5, true, DType::kF32, nullptr},
    {"qwen2.5-0.5b", "qwen2", 896, 4864, 24, 14, 2, 0, 151936, 32768, 1000000.0, 1e-6, true, DType::kBF16, nullptr},
    {"qwen3-0.6b", "qwen3", 1024, 3072, 28, 16, 8, 128, 151936, 40960, 1000000.0, 1e-6, true, DType::kBF16, nullptr},
    {"llama-3.2-1b", "llama", 2048, 8192, 16, 32, 8, 64, 128256, 131072, 500000.0, 1e-5, true, DType::kBF16,
     R"({"rope_type":"llama3","factor":32.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192})"},
    {"smollm2-360m", "llama", 960, 2560, 32, 15, 5, 0, 49152, 8192, 100000.0, 1e-5, true, DType::kBF16, nullptr},
};

// Portable normal samples: splitmix64 + Box-Muller. std::normal_distribution
// is implementation-defined, and checkpoints must be identical everywhere.
class NormalStream {
 public:
  explicit NormalStream(std::uint64_t seed) : state_(seed) {}
  float Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(Bits() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(Bits() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = static_cast<float>(r * std::sin(2.0 * M_PI * u2));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(2.0 * M_PI * u2));
  }

 private:
  std::uint64_t Bits() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t state_;
  bool has_spare_ = false;
  float spare_ = 0;
};

// FNV-1a: a stable per-tensor seed. Written out (six lines) rather than
// taken from a hashing library so the torch-free core depends on nothing
// but a JSON library, also on machines without the network packages.
std::uint64_t NameHash(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

TensorToWrite RandomTensor(const TensorSpec& spec, DType dtype, std::uint64_t seed, std::int64_t hidden) {
  // Scales larger than HF's initializer so logits are not degenerate
  // (embeddings N(0,0.5), projections N(0,0.25) at hidden 64, shrinking as
  // 1/sqrt(fan_in) for wider models), norms 1+N(0,0.1), biases N(0,0.1).
  const std::string& n = spec.name;
  auto ends_with = [&](const char* s) {
    const std::size_t l = std::strlen(s);
    return n.size() >= l && n.compare(n.size() - l, l, s) == 0;
  };
  double mean = 0, stddev;
  if (n == "model.embed_tokens.weight" || n == "transformer.embed_tokens.weight" || n == "lm_head.weight") {
    stddev = 0.5 * std::sqrt(64.0 / static_cast<double>(hidden));
    if (hidden <= 64) stddev = 0.5;
  } else if (ends_with("norm.weight") || ends_with("LayerNorm.weight")) {
    mean = 1.0;
    stddev = 0.1;
  } else if (ends_with(".bias")) {
    stddev = 0.1;
  } else {
    const double fan_in = static_cast<double>(spec.shape.back());
    stddev = 0.25 * std::sqrt(64.0 / fan_in);
  }
  NormalStream rng(seed ^ NameHash(n));
  std::int64_t numel = 1;
  for (auto d : spec.shape) numel *= d;
  TensorToWrite t{n, dtype, spec.shape, std::vector<std::uint8_t>(static_cast<std::size_t>(numel) * DTypeSize(dtype))};
  for (std::int64_t i = 0; i < numel; ++i) {
    const float x = static_cast<float>(mean + stddev * rng.Next());
    if (dtype == DType::kF32) {
      std::memcpy(t.bytes.data() + 4 * i, &x, 4);
    } else {
      const std::uint16_t h = dtype == DType::kBF16 ? FloatToBF16(x) : FloatToF16(x);
      std::memcpy(t.bytes.data() + 2 * i, &h, 2);
    }
  }
  return t;
}

// A byte-level BPE vocabulary (GPT-2 / Qwen style): the 256 byte tokens, then
// merges that grow lowercase words (with and without the leading-space
// marker) until the vocabulary is full, then three special tokens. It is a
// valid tokenizer.json for any vocab size >= 259; the text a random model
// produces through it is gibberish, by design.
json MakeTokenizerJson(std::int64_t vocab_size) {
  // GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 and up.
  std::vector<std::string> byte_token(256);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    byte_token[b] = s;
  }
  const std::int64_t regular = vocab_size - 3;
  json vocab = json::object();
  std::vector<std::string> tokens;
  for (int b = 0; b < 256 && static_cast<std::int64_t>(tokens.size()) < regular; ++b) {
    vocab[byte_token[b]] = tokens.size();
    tokens.push_back(byte_token[b]);
  }
  json merges = json::array();
  std::vector<std::string> frontier;  // tokens to extend by one letter, in creation order
  for (char c = 'a'; c <= 'z'; ++c) frontier.push_back(std::string(1, c));
  for (char c = 'a'; c <= 'z'; ++c) frontier.push_back(byte_token[' '] + std::string(1, c));
  // The space-prefixed letters themselves are merges of "Ġ" and a letter.
  for (char c = 'a'; c <= 'z' && static_cast<std::int64_t>(tokens.size()) < regular; ++c) {
    const std::string t = byte_token[' '] + std::string(1, c);
    merges.push_back(byte_token[' '] + " " + std::string(1, c));
    vocab[t] = tokens.size();
    tokens.push_back(t);
  }
  for (std::size_t i = 0; i < frontier.size() && static_cast<std::int64_t>(tokens.size()) < regular; ++i) {
    for (char c = 'a'; c <= 'z' && static_cast<std::int64_t>(tokens.size()) < regular; ++c) {
      const std::string t = frontier[i] + std::string(1, c);
      merges.push_back(frontier[i] + " " + std::string(1, c));
      vocab[t] = tokens.size();
      tokens.push_back(t);
      frontier.push_back(t);
    }
  }
  json added = json::array();
  const char* specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (int i = 0; i < 3; ++i)
    added.push_back({{"id", regular + i},
                     {"content", specials[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  const json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  json post = byte_level;
  post["trim_offsets"] = false;
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", post},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", merges}}}};
}

constexpr const char* kChatMLTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

Status WriteJson(const std::string& path, const json& j) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return InvalidArgument(path + ": cannot open for writing");
  out << j.dump(2) << "\n";
  out.close();
  if (!out) return InvalidArgument(path + ": write failed");
  return Status::Ok();
}

const Preset* FindPreset(const std::string& name) {
  for (const auto& p : kPresets)
    if (name == p.name) return &p;
  return nullptr;
}

}  // namespace

std::vector<std::string> ModelPresetNames() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

StatusOr<std::string> MakeModelConfigJson(const MakeModelOptions& o) {
  const Preset* preset = FindPreset(o.preset);
  if (preset == nullptr) {
    std::string names;
    for (const auto& n : ModelPresetNames()) names += (names.empty() ? "" : ", ") + n;
    return InvalidArgument("unknown preset '" + o.preset + "' (known: " + names + ")");
  }
  const std::string arch = o.arch.empty() ? preset->arch : o.arch;
  const DType dtype = o.dtype.value_or(preset->dtype);
  if (!IsFloatWeightDType(dtype)) return InvalidArgument("dtype must be float32, float16 or bfloat16");
  const std::int64_t vocab = o.vocab_size.value_or(preset->vocab);
  if (vocab < 259) return InvalidArgument("vocab size must be at least 259 (256 bytes + 3 special tokens)");

  json config = json::object();
  if (arch == "llama") {
    config["architectures"] = {"LlamaForCausalLM"};
    config["model_type"] = "llama";
  } else if (arch == "qwen2") {
    config["architectures"] = {"Qwen2ForCausalLM"};
    config["model_type"] = "qwen2";
  } else if (arch == "qwen3") {
    config["architectures"] = {"Qwen3ForCausalLM"};
    config["model_type"] = "qwen3";
  } else {
    return InvalidArgument("unknown architecture '" + arch + "' (known: llama, qwen2, qwen3)");
  }
  config["vocab_size"] = vocab;
  config["hidden_size"] = o.hidden_size.value_or(preset->hidden);
  config["intermediate_size"] = o.intermediate_size.value_or(preset->intermediate);
  config["num_hidden_layers"] = o.num_layers.value_or(preset->layers);
  config["num_attention_heads"] = o.num_heads.value_or(preset->heads);
  config["num_key_value_heads"] = o.num_kv_heads.value_or(preset->kv_heads);
  const std::int64_t head_dim = o.head_dim.value_or(preset->head_dim);
  if (head_dim > 0) config["head_dim"] = head_dim;
  config["max_position_embeddings"] = o.max_position_embeddings.value_or(preset->max_pos);
  config["rms_norm_eps"] = preset->rms_eps;
  config["rope_theta"] = preset->rope_theta;
  const std::string scaling =
      o.rope_scaling_json.empty() ? (preset->rope_scaling ? preset->rope_scaling : "") : o.rope_scaling_json;
  if (scaling.empty()) {
    config["rope_scaling"] = nullptr;
  } else {
    json s = json::parse(scaling, nullptr, false);
    if (s.is_discarded() || !s.is_object()) return InvalidArgument("--rope-scaling is not a JSON object");
    config["rope_scaling"] = s;
  }
  config["hidden_act"] = "silu";
  config["tie_word_embeddings"] = o.tie_word_embeddings.value_or(preset->tied);
  if (arch == "llama") {
    config["attention_bias"] = false;
    config["mlp_bias"] = false;
  }
  if (arch == "qwen3") config["attention_bias"] = false;
  if (arch != "llama") config["use_sliding_window"] = false;
  config["torch_dtype"] = dtype == DType::kF32 ? "float32" : dtype == DType::kBF16 ? "bfloat16" : "float16";
  config["bos_token_id"] = nullptr;
  config["eos_token_id"] = vocab - 3;
  if (o.int4) config["quantization_config"] = json::parse(Int4QuantizationConfigJson(*o.int4));

  RS_RETURN_IF_ERROR(ParseModelConfig(config.dump(), "generated config.json").status());
  return config.dump(2);
}

namespace {

// The files sentence-transformers saves beside a Transformer module.
Status WriteSentenceTransformersFiles(const std::string& out_dir, const MakeEncoderOptions& o) {
  // auto: what sentence-transformers models of the kind use (mean for
  // encoders, the last token for decoder trunks).
  const bool decoder = o.arch != "modernbert" && o.arch != "roformer";
  RS_ASSIGN_OR_RETURN(embedding::Pooling pooling, embedding::ParsePooling(o.pooling != "auto" ? o.pooling
                                                                          : decoder           ? "lasttoken"
                                                                                              : "mean"));
  const json modules = json::array({
      {{"idx", 0}, {"name", "0"}, {"path", ""}, {"type", "sentence_transformers.models.Transformer"}},
      {{"idx", 1}, {"name", "1"}, {"path", "1_Pooling"}, {"type", "sentence_transformers.models.Pooling"}},
      {{"idx", 2}, {"name", "2"}, {"path", "2_Normalize"}, {"type", "sentence_transformers.models.Normalize"}},
  });
  RS_RETURN_IF_ERROR(WriteJson(out_dir + "/modules.json", modules));
  std::error_code ec;
  fs::create_directories(out_dir + "/1_Pooling", ec);
  fs::create_directories(out_dir + "/2_Normalize", ec);
  if (ec) return InvalidArgument(out_dir + ": cannot create the module folders: " + ec.message());
  RS_RETURN_IF_ERROR(WriteJson(out_dir + "/1_Pooling/config.json",
                               {{"word_embedding_dimension", o.hidden_size},
                                {"pooling_mode_cls_token", pooling == embedding::Pooling::kCls},
                                {"pooling_mode_mean_tokens", pooling == embedding::Pooling::kMean},
                                {"pooling_mode_max_tokens", pooling == embedding::Pooling::kMax},
                                {"pooling_mode_mean_sqrt_len_tokens", false},
                                {"pooling_mode_weightedmean_tokens", false},
                                {"pooling_mode_lasttoken", pooling == embedding::Pooling::kLastToken},
                                {"include_prompt", true}}));
  RS_RETURN_IF_ERROR(WriteJson(out_dir + "/config_sentence_transformers.json",
                               {{"prompts", {{"query", "search_query: "}, {"document", "search_document: "}}},
                                {"default_prompt_name", nullptr},
                                {"similarity_fn_name", "cosine"}}));
  return WriteJson(out_dir + "/sentence_bert_config.json",
                   {{"max_seq_length", o.max_position_embeddings}, {"do_lower_case", false}});
}

}  // namespace

Status MakeEncoderModel(const std::string& out_dir, const MakeEncoderOptions& o) {
  if (o.vocab_size < 259 + 3) return InvalidArgument("vocab_size must be at least 262");
  const std::int64_t vocab = o.vocab_size;
  const std::int64_t cls = vocab - 3, sep = vocab - 2, pad = vocab - 1;
  if (o.arch != "modernbert" && o.arch != "roformer" && o.arch != "llama" && o.arch != "qwen2" && o.arch != "qwen3")
    return InvalidArgument("unknown QA architecture '" + o.arch + "' (modernbert, roformer, llama, qwen2, qwen3)");
  json decoder;  // Llama/Qwen2/Qwen3ForQuestionAnswering: the decoder generator's config, span head
  if (o.arch == "llama" || o.arch == "qwen2" || o.arch == "qwen3") {
    MakeModelOptions mo;
    mo.arch = o.arch;
    mo.dtype = o.dtype;
    mo.hidden_size = o.hidden_size;
    mo.intermediate_size = o.intermediate_size;
    mo.num_layers = o.num_layers;
    mo.num_heads = o.num_heads;
    mo.num_kv_heads = std::max<std::int64_t>(1, o.num_heads / 2);  // grouped-query attention
    mo.head_dim = o.hidden_size / o.num_heads;
    mo.vocab_size = vocab;
    mo.max_position_embeddings = o.max_position_embeddings;
    mo.tie_word_embeddings = false;
    RS_ASSIGN_OR_RETURN(std::string text, MakeModelConfigJson(mo));
    decoder = json::parse(text);
    const std::string name = o.arch == "llama" ? "Llama" : o.arch == "qwen2" ? "Qwen2" : "Qwen3";
    decoder["architectures"] = {name + "ForQuestionAnswering"};
    decoder["eos_token_id"] = sep;
    decoder["pad_token_id"] = pad;
  }
  const json roformer = {{"architectures", {"RoFormerForQuestionAnswering"}},
                         {"model_type", "roformer"},
                         {"vocab_size", vocab},
                         {"embedding_size", o.hidden_size},
                         {"hidden_size", o.hidden_size},
                         {"intermediate_size", o.intermediate_size},
                         {"num_hidden_layers", o.num_layers},
                         {"num_attention_heads", o.num_heads},
                         {"max_position_embeddings", o.max_position_embeddings},
                         {"type_vocab_size", 2},
                         {"hidden_act", "gelu"},
                         {"layer_norm_eps", 1e-12},
                         {"rotary_value", false},
                         {"pad_token_id", pad},
                         {"id2label", {{"0", "LABEL_0"}, {"1", "LABEL_1"}}},
                         {"torch_dtype", o.dtype == DType::kBF16 ? "bfloat16" : "float32"}};
  const json modernbert = {{"architectures", {"ModernBertForQuestionAnswering"}},
                           {"model_type", "modernbert"},
                           {"vocab_size", vocab},
                           {"hidden_size", o.hidden_size},
                           {"intermediate_size", o.intermediate_size},
                           {"num_hidden_layers", o.num_layers},
                           {"num_attention_heads", o.num_heads},
                           {"max_position_embeddings", o.max_position_embeddings},
                           {"global_attn_every_n_layers", 3},
                           {"local_attention", o.local_attention},
                           {"global_rope_theta", 160000.0},
                           {"local_rope_theta", 10000.0},
                           {"hidden_activation", "gelu"},
                           {"classifier_activation", "gelu"},
                           {"norm_eps", 1e-5},
                           {"norm_bias", false},
                           {"cls_token_id", cls},
                           {"sep_token_id", sep},
                           {"pad_token_id", pad},
                           {"id2label", {{"0", "LABEL_0"}, {"1", "LABEL_1"}}},
                           {"torch_dtype", o.dtype == DType::kBF16 ? "bfloat16" : "float32"}};
  if (o.head != "qa" && o.head != "embedding" && o.head != "sequence" && o.head != "token")
    return InvalidArgument("head '" + o.head + "' must be qa, embedding, sequence or token");
  if (o.head == "token" && !decoder.is_null())
    return InvalidArgument("token classifiers are encoders (modernbert, roformer)");
  const bool embedder = o.head == "embedding";
  json config = o.arch == "roformer" ? roformer : o.arch == "modernbert" ? modernbert : decoder;
  const std::string qa = config["architectures"][0].get<std::string>();
  const std::string family = qa.substr(0, qa.size() - std::string("ForQuestionAnswering").size());
  if (embedder) {  // the base model's class: ModernBertModel, RoFormerModel, LlamaModel, ...
    config["architectures"] = {family + "Model"};
    config.erase("id2label");
  } else if (o.head != "qa") {
    if (o.labels.empty()) return InvalidArgument("a classifier needs at least one label");
    config["architectures"] = {family +
                               (o.head == "sequence" ? "ForSequenceClassification" : "ForTokenClassification")};
    json id2label = json::object();
    for (std::size_t i = 0; i < o.labels.size(); ++i) id2label[std::to_string(i)] = o.labels[i];
    config["id2label"] = id2label;
    config["num_labels"] = o.labels.size();
    if (o.head == "sequence" && o.labels.size() == 1)  // what sentence-transformers' CrossEncoder saves
      config["sentence_transformers"] = {{"activation_fn", "torch.nn.modules.activation.Sigmoid"}};
  }
  RS_ASSIGN_OR_RETURN(EncoderConfig parsed, ParseEncoderConfig(config.dump(), "generated config.json"));
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return InvalidArgument(out_dir + ": cannot create directory: " + ec.message());
  std::vector<TensorToWrite> tensors;
  // Encoders list their trunk's tensors with the family prefix; a decoder
  // base model's are already unprefixed.
  const std::string prefix = embedder && parsed.family != EncoderFamily::kDecoder ? BaseModelPrefix(parsed.family) : "";
  for (const auto& spec : ExpectedEncoderTensors(parsed)) {
    tensors.push_back(RandomTensor(spec, o.dtype, o.seed, o.hidden_size));
    tensors.back().name = spec.name.substr(prefix.size());  // the base model's names
  }
  if (embedder) RS_RETURN_IF_ERROR(WriteSentenceTransformersFiles(out_dir, o));
  RS_RETURN_IF_ERROR(WriteSafetensors(out_dir + "/model.safetensors", tensors, {{"format", "pt"}}));
  RS_RETURN_IF_ERROR(WriteJson(out_dir + "/config.json", config));
  // The decoder generator's byte-level BPE with BERT-style specials and
  // pair template.
  json tok = MakeTokenizerJson(vocab);
  const char* specials[] = {"[CLS]", "[SEP]", "[PAD]"};
  for (int i = 0; i < 3; ++i) tok["added_tokens"][i]["content"] = specials[i];
  auto piece = [](const char* id, int type) { return json{{"SpecialToken", {{"id", id}, {"type_id", type}}}}; };
  auto seq = [](const char* id, int type) { return json{{"Sequence", {{"id", id}, {"type_id", type}}}}; };
  const json templ = {{"type", "TemplateProcessing"},
                      {"single", {piece("[CLS]", 0), seq("A", 0), piece("[SEP]", 0)}},
                      {"pair", {piece("[CLS]", 0), seq("A", 0), piece("[SEP]", 0), seq("B", 1), piece("[SEP]", 1)}},
                      {"special_tokens",
                       {{"[CLS]", {{"id", "[CLS]"}, {"ids", {cls}}, {"tokens", {"[CLS]"}}}},
                        {"[SEP]", {{"id", "[SEP]"}, {"ids", {sep}}, {"tokens", {"[SEP]"}}}}}}};
  json byte_level = tok["post_processor"];
  byte_level["trim_offsets"] = true;  // answers start at the word, not at its leading space
  tok["post_processor"] = {{"type", "Sequence"}, {"processors", {byte_level, templ}}};
  RS_RETURN_IF_ERROR(WriteJson(out_dir + "/tokenizer.json", tok));
  return WriteJson(out_dir + "/tokenizer_config.json", {{"cls_token", "[CLS]"},
                                                        {"sep_token", "[SEP]"},
                                                        {"pad_token", "[PAD]"},
                                                        {"model_max_length", o.max_position_embeddings},
                                                        {"tokenizer_class", "PreTrainedTokenizerFast"}});
}

Status MakeModel(const std::string& out_dir, const MakeModelOptions& o) {
  RS_ASSIGN_OR_RETURN(std::string config_text, MakeModelConfigJson(o));
  const json config = json::parse(config_text);
  RS_ASSIGN_OR_RETURN(ModelConfig parsed, ParseModelConfig(config_text, "generated config.json"));
  const std::int64_t vocab = parsed.vocab_size;
  const DType dtype = o.dtype.value_or(FindPreset(o.preset)->dtype);

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return InvalidArgument(out_dir + ": cannot create directory: " + ec.message());

  std::vector<TensorToWrite> tensors;
  ModelConfig float_config = parsed;
  float_config.int4_weights.reset();
  for (const auto& spec : ExpectedTensors(float_config)) {
    const std::string suffix = "_proj.weight";
    const bool projection = spec.name.size() > suffix.size() &&
                            spec.name.compare(spec.name.size() - suffix.size(), suffix.size(), suffix) == 0;
    if (!parsed.int4_weights || !projection) {
      tensors.push_back(RandomTensor(spec, dtype, o.seed, parsed.hidden_size));
      continue;
    }
    const TensorToWrite f = RandomTensor(spec, DType::kF32, o.seed, parsed.hidden_size);
    std::vector<float> w(f.bytes.size() / 4);
    std::memcpy(w.data(), f.bytes.data(), f.bytes.size());
    const std::string module = spec.name.substr(0, spec.name.size() - 7);  // without ".weight"
    // Projections that read one input share its act-order, as GPTQ's
    // (their inputs' Hessians are one), so the loader can stack them.
    std::string input = module;
    for (const char* other : {"k_proj", "v_proj", "up_proj"})
      if (auto at = input.rfind(other); at != std::string::npos)
        input.replace(at, std::strlen(other), other[0] == 'u' ? "gate_proj" : "q_proj");
    const std::int64_t n = spec.shape[0], k = spec.shape[1];
    const auto g_idx = Int4GroupIndex(*parsed.int4_weights, k, o.seed ^ NameHash(input + "#g_idx"));
    for (auto& t : WriteInt4Projection(*parsed.int4_weights, module, w, n, k, g_idx, dtype))
      tensors.push_back(std::move(t));
  }
  RS_RETURN_IF_ERROR(WriteSafetensors(out_dir + "/model.safetensors", tensors, {{"format", "pt"}}));
  tensors.clear();

  RS_RETURN_IF_ERROR(WriteJson(out_dir + "/config.json", config));
  RS_RETURN_IF_ERROR(
      WriteJson(out_dir + "/generation_config.json", {{"eos_token_id", {vocab - 3, vocab - 1}}, {"do_sample", false}}));
  RS_RETURN_IF_ERROR(WriteJson(out_dir + "/tokenizer.json", MakeTokenizerJson(vocab)));
  json added_decoder = json::object();
  const char* specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (int i = 0; i < 3; ++i)
    added_decoder[std::to_string(vocab - 3 + i)] = {{"content", specials[i]}, {"lstrip", false},
                                                    {"normalized", false},    {"rstrip", false},
                                                    {"single_word", false},   {"special", true}};
  RS_RETURN_IF_ERROR(
      WriteJson(out_dir + "/tokenizer_config.json", {{"added_tokens_decoder", added_decoder},
                                                     {"bos_token", nullptr},
                                                     {"eos_token", "<|im_end|>"},
                                                     {"pad_token", "<|endoftext|>"},
                                                     {"chat_template", kChatMLTemplate},
                                                     {"model_max_length", parsed.max_position_embeddings},
                                                     {"tokenizer_class", "PreTrainedTokenizerFast"},
                                                     {"clean_up_tokenization_spaces", false}}));
  return Status::Ok();
}

}  // namespace ropeserve

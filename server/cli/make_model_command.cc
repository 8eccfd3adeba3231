// `ropeserve make-model`: writes a random-weight checkpoint (see
// server/checkpoint/model_generator.h).
#include <cstdio>
#include <memory>

#include "server/checkpoint/model_generator.h"
#include "server/cli/commands.h"

namespace ropeserve::cli {

namespace {
struct MakeModelFlags {
  std::string out;
  std::string dtype = "auto";
  MakeModelOptions options;
};
}  // namespace

Runner AddMakeModel(CLI::App& app) {
  auto f = std::make_shared<MakeModelFlags>();
  CLI::App* sub = app.add_subcommand("make-model",
                                     "Write a deterministic random-weight checkpoint (demo weights: meaningless text)");
  sub->add_option("--out", f->out, "Output directory")->required();
  std::string presets;
  for (const auto& n : ModelPresetNames()) presets += (presets.empty() ? "" : ", ") + n;
  sub->add_option("--preset", f->options.preset, "Shape preset: " + presets)
      ->capture_default_str()
      ->check(CLI::IsMember(ModelPresetNames()));
  sub->add_option("--arch", f->options.arch, "Architecture (default: the preset's)")
      ->check(CLI::IsMember({"llama", "qwen2", "qwen3"}));
  sub->add_option("--dtype", f->dtype, "Storage dtype (auto = the preset's)")->check(CLI::IsMember(kDTypeChoices));
  sub->add_option("--seed", f->options.seed, "Random seed")->capture_default_str();
  sub->add_option("--hidden-size", f->options.hidden_size)->check(CLI::Range(1, 1 << 16));
  sub->add_option("--intermediate-size", f->options.intermediate_size)->check(CLI::Range(1, 1 << 18));
  sub->add_option("--layers", f->options.num_layers)->check(CLI::Range(1, 1024));
  sub->add_option("--heads", f->options.num_heads)->check(CLI::Range(1, 1024));
  sub->add_option("--kv-heads", f->options.num_kv_heads)->check(CLI::Range(1, 1024));
  sub->add_option("--head-dim", f->options.head_dim)->check(CLI::Range(2, 1024));
  sub->add_option("--vocab-size", f->options.vocab_size)->check(CLI::Range(259, 1 << 22));
  sub->add_option("--max-position-embeddings", f->options.max_position_embeddings)->check(CLI::Range(1, 1 << 24));
  sub->add_option("--tie-word-embeddings", f->options.tie_word_embeddings, "true or false");
  sub->add_option("--rope-scaling", f->options.rope_scaling_json,
                  R"(rope_scaling JSON, e.g. {"rope_type":"linear","factor":2.0})");
  auto int4_format = std::make_shared<std::string>();
  auto int4 = std::make_shared<Int4Checkpoint>();
  auto asymmetric = std::make_shared<bool>(false);
  sub->add_option("--int4-format", *int4_format,
                  "Write the decoder projections as 4-bit weights in this checkpoint format, quantized from the "
                  "float weights (gptq: AutoGPTQ's v1 layout; gptq_v2; awq: AutoAWQ's GEMM layout; "
                  "compressed-tensors: pack-quantized)")
      ->check(CLI::IsMember({"gptq", "gptq_v2", "awq", "compressed-tensors"}));
  sub->add_option("--group-size", int4->group_size,
                  "With --int4-format: input columns per scale (-1: one scale per row)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 20));
  sub->add_flag("--asymmetric", *asymmetric,
                "With --int4-format gptq or compressed-tensors: zero points (awq: always)");
  sub->add_flag("--act-order", int4->act_order,
                "With --int4-format gptq or compressed-tensors: columns in a random order of groups (g_idx), as "
                "GPTQ's desc_act leaves them");
  auto qa = std::make_shared<bool>(false);
  auto qa_arch = std::make_shared<std::string>("modernbert");
  sub->add_flag("--qa", *qa,
                "Write an extractive-QA span model instead (for `serve --qa`; default tiny; --seed, --dtype "
                "float32|bfloat16, --hidden-size, --intermediate-size, --layers, --heads, --vocab-size and "
                "--max-position-embeddings apply)");
  sub->add_option("--qa-arch", *qa_arch,
                  "With --qa, --embedding, --classifier or --token-classifier: modernbert, roformer, llama, qwen2 or "
                  "qwen3 (a causal trunk)")
      ->capture_default_str()
      ->check(CLI::IsMember({"modernbert", "roformer", "llama", "qwen2", "qwen3"}));
  auto embedding = std::make_shared<bool>(false);
  auto pooling = std::make_shared<std::string>("auto");
  sub->add_flag("--embedding", *embedding,
                "Write a sentence-embedding model instead (for `serve --encoder`): the base model of --qa-arch "
                "(ModernBertModel, RoFormerModel, LlamaModel, Qwen2Model, Qwen3Model) with sentence-transformers "
                "metadata (modules.json, 1_Pooling, 2_Normalize, prompts "
                "\"query\" and \"document\"); the --qa sizes apply")
      ->excludes("--qa");
  sub->add_option("--pooling", *pooling,
                  "With --embedding: cls, mean, max, lasttoken, or auto (mean for encoders, lasttoken for decoders)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cls", "mean", "max", "lasttoken"}));
  auto classifier = std::make_shared<std::vector<std::string>>();
  auto token_classifier = std::make_shared<std::vector<std::string>>();
  sub->add_option("--classifier", *classifier,
                  "Write a sequence classifier instead (for `serve --encoder`: /classify, TEI's /predict; with "
                  "one label a cross-encoder reranker for /rerank and /score): …ForSequenceClassification of "
                  "--qa-arch with these labels (comma-separated, id2label's order)")
      ->delimiter(',')
      ->excludes("--qa")
      ->excludes("--embedding");
  sub->add_option("--token-classifier", *token_classifier,
                  "Write a token classifier instead (for `serve --encoder`: /v1/token-classify; ModernBert/"
                  "RoFormerForTokenClassification of --qa-arch) with these labels (comma-separated, e.g. "
                  "O,B-PER,I-PER)")
      ->delimiter(',')
      ->excludes("--qa")
      ->excludes("--embedding")
      ->excludes("--classifier");
  return [f, qa, qa_arch, int4_format, int4, asymmetric, embedding, pooling, classifier, token_classifier] {
    if (*qa || *embedding || !classifier->empty() || !token_classifier->empty()) {
      MakeEncoderOptions eo;
      eo.seed = f->options.seed;
      eo.arch = *qa_arch;
      eo.head = *embedding                   ? "embedding"
                : !classifier->empty()       ? "sequence"
                : !token_classifier->empty() ? "token"
                                             : "qa";
      if (!classifier->empty()) eo.labels = *classifier;
      if (!token_classifier->empty()) eo.labels = *token_classifier;
      eo.pooling = *pooling;
      const MakeModelOptions& m = f->options;
      eo.hidden_size = m.hidden_size.value_or(eo.hidden_size);
      eo.intermediate_size = m.intermediate_size.value_or(eo.intermediate_size);
      eo.num_layers = m.num_layers.value_or(eo.num_layers);
      eo.num_heads = m.num_heads.value_or(eo.num_heads);
      eo.vocab_size = m.vocab_size.value_or(eo.vocab_size);
      eo.max_position_embeddings = m.max_position_embeddings.value_or(eo.max_position_embeddings);
      if (auto d = ParseDTypeFlag(f->dtype)) eo.dtype = *d;
      if (eo.hidden_size % eo.num_heads != 0 || (eo.hidden_size / eo.num_heads) % 2 != 0)
        return Fail("--hidden-size must be a multiple of --heads with an even head dimension");
      Status s = MakeEncoderModel(f->out, eo);
      if (!s.ok()) return Fail(s.ToString());
      const char* kind = eo.head == "embedding"  ? "sentence-embedding"
                         : eo.head == "sequence" ? "sequence-classification"
                         : eo.head == "token"    ? "token-classification"
                                                 : "question-answering";
      std::fprintf(stderr, "wrote a %s %s checkpoint to %s\n", qa_arch->c_str(), kind, f->out.c_str());
      return 0;
    }
    f->options.dtype = ParseDTypeFlag(f->dtype);
    if (!int4_format->empty()) {
      if (int4->group_size == 0) return Fail("--group-size must be -1 or positive");
      if (*int4_format == "awq" && int4->act_order) return Fail("--act-order: AWQ has no act-order");
      int4->format = *int4_format == "awq"                  ? Int4Format::kAwq
                     : *int4_format == "compressed-tensors" ? Int4Format::kCompressedTensors
                                                            : Int4Format::kGptq;
      int4->zeros_minus_one = *int4_format == "gptq";
      int4->symmetric = !*asymmetric && int4->format != Int4Format::kAwq;
      f->options.int4 = *int4;
    }
    Status s = MakeModel(f->out, f->options);
    if (!s.ok()) return Fail(s.ToString());
    std::fprintf(stderr, "wrote %s checkpoint to %s\n", f->options.preset.c_str(), f->out.c_str());
    return 0;
  };
}

}  // namespace ropeserve::cli

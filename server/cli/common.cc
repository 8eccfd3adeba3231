#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cctype>
#include <cstdio>
#include <exception>
#include <string>

#include "server/cli/commands.h"

namespace ropeserve::cli {

CLI::Validator DeviceValidator() {
  return CLI::Validator(
      [](const std::string& d) -> std::string {
        if (d == "cpu" || d == "cuda") return "";
        if (d.rfind("cuda:", 0) == 0 && d.size() > 5 && d.size() <= 8 &&
            d.find_first_not_of("0123456789", 5) == std::string::npos)
          return "";
        return "must be cpu, cuda or cuda:N";
      },
      "cpu|cuda|cuda:N");
}

StatusOr<std::vector<TokenId>> ReadJsonIdList(const nlohmann::json& in, const std::string& key) {
  if (!in.is_object() || !in.contains(key) || !in[key].is_array())
    return InvalidArgument("expected {\"" + key + "\": [...]}");
  std::vector<TokenId> ids;
  for (const auto& v : in[key]) {
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() > INT32_MAX)
      return InvalidArgument(key + " must be integers from 0 to 2^31 - 1, got " + v.dump());
    ids.push_back(v.get<TokenId>());
  }
  return ids;
}

StatusOr<std::vector<std::int64_t>> ParseIdList(const std::string& text, const std::string& flag) {
  std::vector<std::int64_t> ids;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) item.erase(0, 1);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.pop_back();
    if (item.empty()) return InvalidArgument(flag + ": empty item in '" + text + "'");
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size()) return InvalidArgument(flag + ": '" + item + "' is not an integer");
    ids.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return ids;
}

void AddSpeculativeFlags(CLI::App* sub, SpeculativeFlags& f) {
  sub->add_option("--speculative", f.method,
                  "Speculative decoding: none, or ngram (prompt lookup: a decode also verifies the tokens that "
                  "followed the latest n-gram's earlier occurrence in the prompt or output; the output is the "
                  "same token for token; it pays when the text repeats its input, as summaries and extracts do)")
      ->capture_default_str()
      ->envname("ROPESERVE_SPECULATIVE")
      ->check(CLI::IsMember({"none", "ngram"}));
  sub->add_option("--num-speculative-tokens", f.num_tokens, "Proposals verified per decode step (--speculative ngram)")
      ->capture_default_str()
      ->envname("ROPESERVE_NUM_SPECULATIVE_TOKENS")
      ->check(CLI::Range(1, kMaxSpeculativeTokens));
  sub->add_option("--prompt-lookup-min", f.min_ngram, "Shortest n-gram looked up (--speculative ngram)")
      ->capture_default_str()
      ->envname("ROPESERVE_PROMPT_LOOKUP_MIN")
      ->check(CLI::Range(1, 64));
  sub->add_option("--prompt-lookup-max", f.max_ngram, "Longest n-gram looked up (--speculative ngram)")
      ->capture_default_str()
      ->envname("ROPESERVE_PROMPT_LOOKUP_MAX")
      ->check(CLI::Range(1, 64));
  sub->add_option("--speculative-disable-by-batch-size", f.disable_by_batch_size,
                  "No proposals in steps while more requests than this run (0 = always propose): verifying costs "
                  "compute, which pays only while a step is bound by reading the weights (on CPUs: one or two "
                  "sequences; docs/benchmarks.md)")
      ->capture_default_str()
      ->envname("ROPESERVE_SPECULATIVE_DISABLE_BY_BATCH_SIZE")
      ->check(CLI::Range(0, 1 << 16));
}

StatusOr<SpeculativeConfig> SpeculativeFrom(const SpeculativeFlags& f) {
  SpeculativeConfig c;
  if (f.method == "none") return c;
  if (f.method != "ngram") return InvalidArgument("--speculative must be none or ngram");
  c.num_tokens = f.num_tokens;
  c.min_ngram = f.min_ngram;
  c.max_ngram = f.max_ngram;
  c.disable_by_batch_size = f.disable_by_batch_size;
  if (c.max_ngram < c.min_ngram)
    return InvalidArgument("--prompt-lookup-max (" + std::to_string(c.max_ngram) +
                           ") must be at least --prompt-lookup-min (" + std::to_string(c.min_ngram) + ")");
  RS_RETURN_IF_ERROR(c.Validate());
  return c;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

}  // namespace ropeserve::cli

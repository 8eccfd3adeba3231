// Black-box tests of the `ropeserve` executable: what a user or another
// implementation's parity harness sees.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>

#include "tests/checkpoint/test_checkpoints.h"

namespace ropeserve {
namespace {

using testing::ScratchDir;

struct RunResult {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};

RunResult RunBinary(const std::string& args, const std::string& scratch) {
  const std::string err_path = scratch + "/stderr.txt";
  const std::string cmd = std::string(ROPESERVE_BINARY) + " " + args + " 2>" + err_path;
  FILE* p = ::popen(cmd.c_str(), "r");
  RunResult r{-1, "", ""};
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = testing::ReadFile(err_path);
  return r;
}

TEST(Cli, HelpListsCommands) {
  ScratchDir d;
  auto r = RunBinary("--help", d.path());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("generate"), std::string::npos);
  EXPECT_NE(r.out.find("make-model"), std::string::npos);
}

TEST(Cli, GenerateJsonMatchesLlamaCppGreedyTokens) {
  ScratchDir d;
  auto golden = testing::ReadJson(testing::TestData("golden/decoder_llama-tiny.json"));
  const auto& c = golden["cases"][1];
  std::string ids;
  for (const auto& id : c["prompt_ids"]) ids += (ids.empty() ? "" : ",") + std::to_string(id.get<int>());
  auto r = RunBinary("generate --model " + testing::TestData("models/llama-tiny") + " --prompt-ids " + ids +
                   " --max-tokens 32 --ignore-eos --top-logprobs 5 --json",
               d.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"], c["prompt_ids"]);
  ASSERT_TRUE(c["first_near_tie_step"].is_null());
  EXPECT_EQ(j["generated_ids"], c["generated_ids"]);
  ASSERT_EQ(j["top_logprobs"].size(), 32u);
  EXPECT_EQ(j["top_logprobs"][0].size(), 5u);
  EXPECT_EQ(j["top_logprobs"][0][0]["id"], c["steps"][0]["top_ids"][0]);
  EXPECT_LT(j["top_logprobs"][0][0]["logprob"].template get<double>(), 0.0);
  EXPECT_TRUE(j.contains("text"));
}

TEST(Cli, MakeModelThenGenerateForEveryArchitecture) {
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    ScratchDir d;
    auto made = RunBinary(std::string("make-model --preset tiny --arch ") + arch + " --out " + d.path() + "/m", d.path());
    ASSERT_EQ(made.exit_code, 0) << made.err;
    for (const char* dtype : {"float32", "bfloat16"}) {
      auto r = RunBinary("generate --model " + d.path() + "/m --prompt-ids 3,4,5 --max-tokens 5 --ignore-eos --json --dtype " +
                       dtype,
                   d.path());
      ASSERT_EQ(r.exit_code, 0) << arch << " " << dtype << ": " << r.err;
      EXPECT_EQ(nlohmann::json::parse(r.out)["generated_ids"].size(), 5u);
    }
  }
}

TEST(Cli, BadCheckpointExitsNonZeroNamingTheFile) {
  ScratchDir d;
  ASSERT_EQ(RunBinary("make-model --preset tiny --vocab-size 300 --out " + d.path() + "/m", d.path()).exit_code, 0);
  const std::string weights = d.path() + "/m/model.safetensors";
  std::string bytes = testing::ReadFile(weights);
  testing::WriteFile(weights, bytes.substr(0, bytes.size() - 1000));
  auto r = RunBinary("generate --model " + d.path() + "/m --prompt-ids 1 --max-tokens 1", d.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("error: DATA_LOSS"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(weights), std::string::npos) << r.err;
}

TEST(Cli, BadArgumentsAreClearErrors) {
  ScratchDir d;
  const std::string model = " --model " + testing::TestData("models/llama-tiny");
  auto no_model = RunBinary("generate --prompt-ids 1", d.path());
  EXPECT_NE(no_model.exit_code, 0);
  EXPECT_NE(no_model.err.find("--model"), std::string::npos) << no_model.err;

  auto bad_ids = RunBinary("generate" + model + " --prompt-ids 1,abc", d.path());
  EXPECT_EQ(bad_ids.exit_code, 1);
  EXPECT_NE(bad_ids.err.find("'abc' is not an integer"), std::string::npos) << bad_ids.err;

  auto out_of_vocab = RunBinary("generate" + model + " --prompt-ids 1,32000", d.path());
  EXPECT_EQ(out_of_vocab.exit_code, 1);
  EXPECT_NE(out_of_vocab.err.find("outside the vocabulary"), std::string::npos) << out_of_vocab.err;

  auto too_long = RunBinary("generate" + model + " --prompt-ids 1 --max-tokens 5000", d.path());
  EXPECT_EQ(too_long.exit_code, 1);
  EXPECT_NE(too_long.err.find("maximum context length is 2048"), std::string::npos) << too_long.err;

  auto no_prompt = RunBinary("generate" + model, d.path());
  EXPECT_NE(no_prompt.exit_code, 0);

  auto bad_preset = RunBinary("make-model --preset nope --out " + d.path() + "/x", d.path());
  EXPECT_NE(bad_preset.exit_code, 0);
}

}  // namespace
}  // namespace ropeserve

namespace ropeserve {
namespace {

// A bf16 checkpoint is computed in float32 by `generate` unless asked, so
// parity checks compare float32 logits.
TEST(Cli, GenerateDefaultsToFloat32ComputeForBf16Checkpoints) {
  testing::ScratchDir d;
  ASSERT_EQ(RunBinary("make-model --preset tiny --dtype bf16 --out " + d.path() + "/m", d.path()).exit_code, 0);
  const std::string base = "generate --model " + d.path() + "/m --prompt-ids 7,8,9 --max-tokens 4 --ignore-eos "
                           "--top-logprobs 3 --json";
  auto def = RunBinary(base, d.path());
  auto f32 = RunBinary(base + " --dtype float32", d.path());
  auto bf16 = RunBinary(base + " --dtype bfloat16", d.path());
  ASSERT_EQ(def.exit_code, 0) << def.err;
  auto top = [](const std::string& out) { return nlohmann::json::parse(out)["top_logprobs"]; };
  EXPECT_EQ(top(def.out), top(f32.out));
  EXPECT_NE(top(def.out), top(bf16.out));
}

}  // namespace
}  // namespace ropeserve

namespace ropeserve {
namespace {

TEST(Cli, BenchReportsThroughputBaselineAndInvariance) {
  testing::ScratchDir d;
  ASSERT_EQ(RunBinary("make-model --preset tiny --out " + d.path() + "/m", d.path()).exit_code, 0);
  auto r = RunBinary("bench --model " + d.path() + "/m --num-requests 12 --concurrency 4 --input-len uniform:3:40 "
                     "--output-len 6 --dtype f32 --baseline static --check-invariance --block-size 8 --json",
                     d.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["generated_tokens"], 12 * 6);
  EXPECT_GT(j["throughput_tok_s"].get<double>(), 0.0);
  EXPECT_GT(j["baseline_tok_s"].get<double>(), 0.0);
  EXPECT_EQ(j["invariance_mismatches"], 0);
  for (const char* key : {"ratio", "kv_waste", "preemptions", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_GE(j["kv_waste"].get<double>(), 0.0);
  EXPECT_LT(j["kv_waste"].get<double>(), 1.0);

  auto bad = RunBinary("bench --model " + d.path() + "/m --input-len uniform:9:3", d.path());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("uniform:A:B"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace ropeserve

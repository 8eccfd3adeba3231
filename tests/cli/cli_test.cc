// Black-box tests of the `ropeserve` executable: what a user or another
// implementation's parity harness sees.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/checkpoint/test_checkpoints.h"

namespace ropeserve {
namespace {

using testing::ScratchDir;

struct RunResult {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};

// `env` (optional): "NAME=value ..." set for the command.
RunResult RunBinary(const std::string& args, const std::string& scratch, const std::string& env = "") {
  const std::string err_path = scratch + "/stderr.txt";
  const std::string cmd =
      (env.empty() ? "" : "env " + env + " ") + std::string(ROPESERVE_BINARY) + " " + args + " 2>" + err_path;
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

// `serve --demo off` (what deployments set) without a model fails at
// start-up with an error that says what to do, before listening.
TEST(Cli, ServeWithoutAModelRefusesWhenDemoIsOff) {
  ScratchDir d;
  for (const char* demo : {"--demo off", "--demo 0"}) {
    auto r = RunBinary(std::string("serve ") + demo + " --http-port 0 --grpc-port -1 --admin-port -1", d.path());
    EXPECT_NE(r.exit_code, 0) << demo;
    EXPECT_NE(r.err.find("no model to serve"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--demo on"), std::string::npos) << r.err;
  }
  auto bad = RunBinary("serve --demo maybe", d.path());
  EXPECT_NE(bad.exit_code, 0);
  // The same value from the environment is refused too, never dropped:
  // CLI11 2.3 (Debian 12) refuses it itself ("--demo: maybe not in ..."),
  // 2.4 (Debian 13) would drop it and main() refuses it ("ROPESERVE_DEMO=maybe
  // is not a valid value ...").
  auto bad_env = RunBinary("serve --http-port 0 --grpc-port -1 --admin-port -1", d.path(), "ROPESERVE_DEMO=maybe");
  EXPECT_NE(bad_env.exit_code, 0);
  EXPECT_NE(bad_env.err.find("maybe"), std::string::npos) << bad_env.err;
  EXPECT_EQ(bad_env.err.find("no model to serve"), std::string::npos) << bad_env.err;
  // The model comes from --model, its older name --summarizer, or the
  // environment (ROPESERVE_MODEL, else the older ROPESERVE_SUMMARIZER): each
  // is read, so a directory that does not exist is named in the error.
  const std::string rest = " --demo off --http-port 0 --grpc-port -1 --admin-port -1";
  for (const auto& [args, env] :
       std::vector<std::pair<std::string, std::string>>{{"serve --model /nonexistent-model" + rest, ""},
                                                        {"serve --summarizer /nonexistent-model" + rest, ""},
                                                        {"serve" + rest, "ROPESERVE_MODEL=/nonexistent-model"},
                                                        {"serve" + rest, "ROPESERVE_SUMMARIZER=/nonexistent-model"}}) {
    auto r = RunBinary(args, d.path(), env);
    EXPECT_NE(r.exit_code, 0) << args << " " << env;
    EXPECT_NE(r.err.find("/nonexistent-model"), std::string::npos) << args << " " << env << ": " << r.err;
  }
}

TEST(Cli, HelpListsCommands) {
  ScratchDir d;
  auto r = RunBinary("--help", d.path());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("generate"), std::string::npos);
  EXPECT_NE(r.out.find("make-model"), std::string::npos);
}

// The CPU kernels' configuration: flags listed in --help with their
// environment variables; bad values, from either, are errors naming them.
TEST(Cli, KernelConfigurationFlagsAndEnvironment) {
  ScratchDir d;
  auto help = RunBinary("--help", d.path());
  for (const char* flag : {"--kernel-isa", "--kernel-avx512", "--kernel-pool-spin-us", "--kernel-int8-vnni-max-rows",
                           "ROPESERVE_KERNEL_ISA", "ROPESERVE_KERNEL_AVX512", "ROPESERVE_KERNEL_POOL_SPIN_US"})
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag << "\n" << help.out;
  EXPECT_EQ(RunBinary("--kernel-isa generic tokenize --help", d.path()).exit_code, 0);
  EXPECT_EQ(RunBinary("--kernel-isa auto tokenize --help", d.path()).exit_code, 0);
  auto bad_isa = RunBinary("--kernel-isa sse4 tokenize --help", d.path());
  EXPECT_NE(bad_isa.exit_code, 0);
  EXPECT_NE(bad_isa.err.find("--kernel-isa"), std::string::npos) << bad_isa.err;
  // An ISA of the other architecture: refused, naming what this CPU runs.
#if defined(__x86_64__)
  auto foreign = RunBinary("--kernel-isa neon tokenize --help", d.path());
#else
  auto foreign = RunBinary("--kernel-isa avx2 tokenize --help", d.path());
#endif
  EXPECT_NE(foreign.exit_code, 0);
  EXPECT_NE(foreign.err.find("cannot run"), std::string::npos) << foreign.err;
  EXPECT_NE(foreign.err.find("generic"), std::string::npos) << foreign.err;
  EXPECT_EQ(RunBinary("--kernel-avx512 off --kernel-pool-spin-us 0 tokenize --help", d.path()).exit_code, 0);
  auto bad_flag = RunBinary("--kernel-avx512 maybe tokenize --help", d.path());
  EXPECT_NE(bad_flag.exit_code, 0);
  EXPECT_NE(bad_flag.err.find("--kernel-avx512"), std::string::npos) << bad_flag.err;
  EXPECT_NE(RunBinary("--kernel-pool-spin-us 1000001 tokenize --help", d.path()).exit_code, 0);
  EXPECT_EQ(RunBinary("--kernel-int8-vnni-max-rows auto tokenize --help", d.path()).exit_code, 0);
  EXPECT_EQ(RunBinary("--kernel-int8-vnni-max-rows 65536 tokenize --help", d.path()).exit_code, 0);
  for (const char* rows : {"65537", "-1", "Auto", "8x"}) {
    auto r = RunBinary(std::string("--kernel-int8-vnni-max-rows ") + rows + " tokenize --help", d.path());
    EXPECT_NE(r.exit_code, 0) << rows;
    EXPECT_NE(r.err.find("--kernel-int8-vnni-max-rows"), std::string::npos) << r.err;
  }
  for (const char* env : {"ROPESERVE_KERNEL_AVX512=maybe", "ROPESERVE_KERNEL_POOL_SPIN_US=-1",
                          "ROPESERVE_KERNEL_INT8_VNNI_MAX_ROWS=12x", "ROPESERVE_KERNEL_ISA=fastest"}) {
    auto r = RunBinary("tokenize --help", d.path(), env);
    EXPECT_EQ(r.exit_code, 2) << env;
    const std::string name = std::string(env).substr(0, std::string(env).find('='));
    EXPECT_NE(r.err.find(name), std::string::npos) << r.err;
  }
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

// Speculative decoding (prompt lookup) from the command line: llama.cpp's
// greedy tokens still, the logprobs the same, a constrained sample the same
// text; bad lookup sizes refused by flag.
TEST(Cli, SpeculativeGenerateKeepsTheOutput) {
  ScratchDir d;
  auto golden = testing::ReadJson(testing::TestData("golden/decoder_llama-tiny.json"));
  const auto& c = golden["cases"][1];
  std::string ids;
  for (const auto& id : c["prompt_ids"]) ids += (ids.empty() ? "" : ",") + std::to_string(id.get<int>());
  const std::string model = " --model " + testing::TestData("models/llama-tiny");
  const std::string spec = " --speculative ngram --num-speculative-tokens 4 --prompt-lookup-min 1";
  auto plain =
      RunBinary("generate" + model + " --prompt-ids " + ids + " --max-tokens 32 --ignore-eos --json", d.path());
  auto fast =
      RunBinary("generate" + model + spec + " --prompt-ids " + ids + " --max-tokens 32 --ignore-eos --json", d.path());
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(fast.exit_code, 0) << fast.err;
  const auto p = nlohmann::json::parse(plain.out), f = nlohmann::json::parse(fast.out);
  EXPECT_EQ(f["generated_ids"], c["generated_ids"]);
  EXPECT_EQ(f["generated_ids"], p["generated_ids"]);
  EXPECT_EQ(f["logprobs"], p["logprobs"]);
  const std::string sampled = " --prompt x --temperature 1 --seed 3 --max-tokens 30 --regex '([a-z]{2}-){3}[0-9]{2}'";
  auto plain_regex =
      RunBinary("generate --model " + testing::TestData("models/llama-tiny") + sampled + " --json", d.path());
  auto fast_regex = RunBinary("generate" + model + spec + sampled + " --json", d.path());
  ASSERT_EQ(plain_regex.exit_code, 0) << plain_regex.err;
  ASSERT_EQ(fast_regex.exit_code, 0) << fast_regex.err;
  EXPECT_EQ(nlohmann::json::parse(fast_regex.out)["text"], nlohmann::json::parse(plain_regex.out)["text"]);
  auto bad = RunBinary("generate" + model +
                           " --speculative ngram --prompt-lookup-min 3 --prompt-lookup-max 2 "
                           "--prompt-ids 1,2",
                       d.path());
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--prompt-lookup-max"), std::string::npos) << bad.err;
}

TEST(Cli, MakeModelThenGenerateForEveryArchitecture) {
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    ScratchDir d;
    auto made =
        RunBinary(std::string("make-model --preset tiny --arch ") + arch + " --out " + d.path() + "/m", d.path());
    ASSERT_EQ(made.exit_code, 0) << made.err;
    for (const char* dtype : {"float32", "bfloat16"}) {
      for (const char* quantization : {"none", "int8", "int4"}) {
        auto r = RunBinary("generate --model " + d.path() +
                               "/m --prompt-ids 3,4,5 --max-tokens 5 --ignore-eos --json --dtype " + dtype +
                               " --quantization " + quantization,
                           d.path());
        ASSERT_EQ(r.exit_code, 0) << arch << " " << dtype << " " << quantization << ": " << r.err;
        EXPECT_EQ(nlohmann::json::parse(r.out)["generated_ids"].size(), 5u);
      }
    }
    EXPECT_NE(RunBinary("generate --model " + d.path() + "/m --prompt-ids 3 --quantization int3", d.path()).exit_code,
              0);
  }
}

// Structured output from the command line: the text is in the language,
// and a constraint that cannot be compiled is an error naming its flag.
TEST(Cli, GenerateWithAConstraint) {
  ScratchDir d;
  ASSERT_EQ(RunBinary("make-model --preset tiny --out " + d.path() + "/m", d.path()).exit_code, 0);
  auto r = RunBinary("generate --model " + d.path() +
                         "/m --prompt x --temperature 1 --seed 3 --max-tokens 30 "
                         "--regex '[a-z]{3}-[0-9]{2}' --json",
                     d.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto out = nlohmann::json::parse(r.out);
  const std::string text = out["text"];
  ASSERT_EQ(text.size(), 6u) << text;
  EXPECT_TRUE(std::islower(static_cast<unsigned char>(text[0])) && text[3] == '-' &&
              std::isdigit(static_cast<unsigned char>(text[5])))
      << text;
  EXPECT_EQ(out["finish_reason"], "stop");
  {
    std::ofstream schema(d.path() + "/s.json");
    schema << R"({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]})";
  }
  r = RunBinary(
      "generate --model " + d.path() + "/m --prompt x --max-tokens 20 --json-schema " + d.path() + "/s.json --json",
      d.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto value = nlohmann::json::parse(nlohmann::json::parse(r.out)["text"].get<std::string>());
  EXPECT_TRUE(value["ok"].is_boolean());
  r = RunBinary("generate --model " + d.path() + "/m --prompt x --regex '(?=a)b'", d.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--regex"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("lookaround"), std::string::npos) << r.err;
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
  EXPECT_NE(too_long.err.find("--max-tokens"), std::string::npos) << too_long.err;
  EXPECT_NE(too_long.err.find("2048"), std::string::npos) << too_long.err;

  auto no_prompt = RunBinary("generate" + model, d.path());
  EXPECT_NE(no_prompt.exit_code, 0);

  auto bad_preset = RunBinary("make-model --preset nope --out " + d.path() + "/x", d.path());
  EXPECT_NE(bad_preset.exit_code, 0);

  // LibTorch has no float16 GEMM on CPU: refused at load, not a 500 per request.
  auto f16 = RunBinary("generate" + model + " --prompt-ids 1,2 --dtype float16", d.path());
  EXPECT_EQ(f16.exit_code, 1);
  EXPECT_NE(f16.err.find("float16 compute is not available on CPU"), std::string::npos) << f16.err;

  // A model that fails to load at once: serve exits with the error (its
  // HTTP thread had not started listening yet; it once waited forever).
  std::filesystem::create_directories(d.path() + "/not-a-model");
  for (int i = 0; i < 3; ++i) {
    auto broken =
        RunBinary("serve --model " + d.path() + "/not-a-model --http-port 0 --grpc-port -1 --admin-port -1", d.path());
    EXPECT_EQ(broken.exit_code, 1);
    EXPECT_NE(broken.err.find("config.json"), std::string::npos) << broken.err;
  }
  auto f16_serve =
      RunBinary("serve" + model + " --http-port 0 --grpc-port -1 --admin-port -1 --dtype float16", d.path());
  EXPECT_EQ(f16_serve.exit_code, 1);
  EXPECT_NE(f16_serve.err.find("float16 compute is not available on CPU"), std::string::npos) << f16_serve.err;

  // Devices: a CPU-only build refuses CUDA workers with the reason, a CUDA
  // build on a machine without a GPU with that reason (the suite runs on
  // machines without one); other names are refused by the flag's check.
  auto cuda = RunBinary(
      "serve" + model + " --http-port 0 --grpc-port -1 --admin-port -1 --dtype bfloat16 --device cuda:1", d.path());
  EXPECT_EQ(cuda.exit_code, 1);
  EXPECT_TRUE(cuda.err.find("CPU workers only") != std::string::npos ||
              cuda.err.find("no CUDA GPU is visible") != std::string::npos)
      << cuda.err;
  for (const char* bad : {"tpu", "cuda:", "cuda:x", "cuda:123456"})
    EXPECT_NE(RunBinary("serve" + model + " --http-port 0 --device " + bad, d.path()).exit_code, 0) << bad;

  // Tracing flags are checked before anything starts.
  auto bad_endpoint = RunBinary("serve" + model + " --http-port 0 --otlp-traces-endpoint ftp://x/v1/traces", d.path());
  EXPECT_EQ(bad_endpoint.exit_code, 1);
  EXPECT_NE(bad_endpoint.err.find("--otlp-traces-endpoint must be an http:// or https:// URL"), std::string::npos)
      << bad_endpoint.err;
  auto bad_headers = RunBinary("serve" + model + " --http-port 0 --otlp-traces-headers 'k=a%0Ab'", d.path());
  EXPECT_EQ(bad_headers.exit_code, 1);
  EXPECT_NE(bad_headers.err.find("control characters"), std::string::npos) << bad_headers.err;
  auto bad_ratio = RunBinary("serve" + model + " --http-port 0 --otlp-traces-sample-ratio 2", d.path());
  EXPECT_NE(bad_ratio.exit_code, 0);
  EXPECT_NE(bad_ratio.err.find("--otlp-traces-sample-ratio"), std::string::npos) << bad_ratio.err;
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
  const std::string base = "generate --model " + d.path() +
                           "/m --prompt-ids 7,8,9 --max-tokens 4 --ignore-eos "
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
  auto r = RunBinary("bench --model " + d.path() +
                         "/m --num-requests 12 --concurrency 4 --input-len uniform:3:40 "
                         "--output-len 6 --dtype f32 --baseline static --check-invariance --block-size 8 --json",
                     d.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["generated_tokens"], 12 * 6);
  EXPECT_GT(j["throughput_tok_s"].get<double>(), 0.0);
  EXPECT_GT(j["baseline_tok_s"].get<double>(), 0.0);
  EXPECT_EQ(j["invariance_mismatches"], 0);
  for (const char* key :
       {"ratio", "kv_waste", "preemptions", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_GE(j["kv_waste"].get<double>(), 0.0);
  EXPECT_LT(j["kv_waste"].get<double>(), 1.0);

  auto bad = RunBinary("bench --model " + d.path() + "/m --input-len uniform:9:3", d.path());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("uniform:A:B"), std::string::npos) << bad.err;

  // One prompt alone: prompt tokens/s (llama-bench's ppN); it must fit the model length.
  auto pp = RunBinary("bench --model " + d.path() +
                          "/m --num-requests 2 --concurrency 2 --input-len 5 --output-len 2 "
                          "--batch1-tokens 0 --prefill-tokens 100 --json",
                      d.path());
  ASSERT_EQ(pp.exit_code, 0) << pp.err;
  const auto prefill = nlohmann::json::parse(pp.out)["prefill"];
  EXPECT_EQ(prefill["tokens"], 100);
  EXPECT_GT(prefill["tok_s"].get<double>(), 0.0);
  auto too_long = RunBinary("bench --model " + d.path() + "/m --max-model-len 64 --prefill-tokens 64", d.path());
  EXPECT_EQ(too_long.exit_code, 1);
  EXPECT_NE(too_long.err.find("--prefill-tokens"), std::string::npos) << too_long.err;
  EXPECT_EQ(nlohmann::json::parse(pp.out)["device"], "cpu");

  // --workload-out: the requests the run used, for another implementation.
  auto dumped = RunBinary("bench --model " + d.path() +
                              "/m --num-requests 3 --concurrency 2 --input-len uniform:2:6 "
                              "--output-len 4 --batch1-tokens 0 --json --workload-out " +
                              d.path() + "/w.json",
                          d.path());
  ASSERT_EQ(dumped.exit_code, 0) << dumped.err;
  std::ifstream wf(d.path() + "/w.json");
  const auto wj = nlohmann::json::parse(wf);
  ASSERT_EQ(wj["prompts"].size(), 3u);
  EXPECT_EQ(wj["output_lens"], nlohmann::json({4, 4, 4}));
  std::int64_t dumped_prompt_tokens = 0;
  for (const auto& p : wj["prompts"]) {
    EXPECT_GE(p.size(), 2u);
    EXPECT_LE(p.size(), 6u);
    dumped_prompt_tokens += static_cast<std::int64_t>(p.size());
  }
  EXPECT_EQ(nlohmann::json::parse(dumped.out)["prompt_tokens"], dumped_prompt_tokens);
  // Speculation over a document's windows: the same tokens generated, its
  // counters reported; the verification cost at two batch sizes.
  {
    std::ofstream doc(d.path() + "/doc.txt");
    for (int i = 0; i < 40; ++i) doc << "The committee met on Monday. The committee met again on Friday. ";
  }
  auto spec = RunBinary("bench --model " + d.path() + "/m --num-requests 4 --concurrency 2 --input-len 60 " +
                            "--output-len 20 --batch1-tokens 0 --dtype f32 --document " + d.path() +
                            "/doc.txt --speculative ngram --prompt-lookup-min 1 "
                            "--speculative-disable-by-batch-size 0 --spec-verify-cost --spec-verify-batches 1,2 --json",
                        d.path());
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  const auto sj = nlohmann::json::parse(spec.out);
  EXPECT_EQ(sj["generated_tokens"], 4 * 20);
  EXPECT_EQ(sj["prompt_tokens"], 4 * 60);
  const auto& sp = sj["speculative"];
  EXPECT_GE(sp["proposed_tokens"].get<double>(), sp["accepted_tokens"].get<double>());
  EXPECT_GE(sp["acceptance_rate"].get<double>(), 0.0);
  EXPECT_LE(sp["acceptance_rate"].get<double>(), 1.0);
  ASSERT_EQ(sj["spec_verify_cost"].size(), 2u);
  for (const auto& row : sj["spec_verify_cost"]) {
    ASSERT_EQ(row["verify"].size(), 3u);
    for (const auto& k : row["verify"]) EXPECT_GT(k["relative_cost"].get<double>(), 0.0);
  }
  auto missing_doc = RunBinary("bench --model " + d.path() + "/m --document " + d.path() + "/none.txt", d.path());
  EXPECT_NE(missing_doc.exit_code, 0);

  auto unwritable = RunBinary("bench --model " + d.path() + "/m --num-requests 1 --batch1-tokens 0 --workload-out " +
                                  d.path() + "/no/such/dir/w.json",
                              d.path());
  EXPECT_EQ(unwritable.exit_code, 1);
  EXPECT_NE(unwritable.err.find("--workload-out"), std::string::npos) << unwritable.err;

  // --device as serve's: a CPU-only build, or a CUDA build on a machine
  // without a GPU, refuses CUDA with the reason.
  auto cuda = RunBinary("bench --model " + d.path() + "/m --dtype bf16 --device cuda", d.path());
  EXPECT_EQ(cuda.exit_code, 1);
  EXPECT_TRUE(cuda.err.find("CPU workers only") != std::string::npos ||
              cuda.err.find("no CUDA GPU is visible") != std::string::npos)
      << cuda.err;
  EXPECT_NE(RunBinary("bench --model " + d.path() + "/m --device tpu", d.path()).exit_code, 0);
}

}  // namespace
}  // namespace ropeserve

namespace ropeserve {
namespace {

std::string WriteScratch(const testing::ScratchDir& d, const std::string& name, const std::string& content) {
  const std::string path = d.path() + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

std::vector<nlohmann::json> JsonLines(const std::string& out) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// `generate --prompt` tokenizes like the reference: the golden prompt ids
// were made from the same text by the Hugging Face tokenizers library.
TEST(Cli, GeneratePromptTextTokenizesLikeReferenceAndPrintsText) {
  ScratchDir d;
  auto golden = testing::ReadJson(testing::TestData("golden/decoder_llama-tiny.json"));
  const auto& c = golden["cases"][1];
  const std::string prompt = WriteScratch(d, "prompt.txt", c["text"].get<std::string>());
  auto r = RunBinary("generate --model " + testing::TestData("models/llama-tiny") + " --prompt \"$(cat " + prompt +
                         ")\" --max-tokens 32 --ignore-eos --json",
                     d.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"], c["prompt_ids"]);
  EXPECT_EQ(j["generated_ids"], c["generated_ids"]);
  EXPECT_FALSE(j["text"].get<std::string>().empty());
}

TEST(Cli, TokenizeMatchesGoldenIdsAndOffsets) {
  ScratchDir d;
  auto golden = testing::ReadJson(testing::TestData("golden/tokenizers_llama3.json"));
  std::string input;
  for (const auto& item : golden["items"]) input += item["text"].dump() + "\n";
  const std::string in = WriteScratch(d, "in.jsonl", input);
  for (bool special : {false, true}) {
    auto r = RunBinary("tokenize --tokenizer " + testing::TestData("tokenizers/llama3") +
                           (special ? " --add-special-tokens" : "") + " < " + in,
                       d.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto lines = JsonLines(r.out);
    ASSERT_EQ(lines.size(), golden["items"].size());
    for (size_t i = 0; i < lines.size(); ++i) {
      const auto& item = golden["items"][i];
      EXPECT_EQ(lines[i]["ids"], item[special ? "ids_with_special" : "ids"]) << i;
      EXPECT_EQ(lines[i]["offsets"], item[special ? "offsets_with_special" : "offsets"]) << i;
    }
  }
}

TEST(Cli, TokenizeDecodeAndBadLines) {
  ScratchDir d;
  const std::string in = WriteScratch(
      d, "in.jsonl", "{\"ids\":[9707,1879]}\n{\"ids\":[151643]}\n{\"ids\":[-1]}\n{\"ids\":[999999999]}\nnot json\n");
  auto r = RunBinary(
      "tokenize --decode --skip-special-tokens --tokenizer " + testing::TestData("tokenizers/qwen3") + " < " + in,
      d.path());
  EXPECT_EQ(r.exit_code, 1);
  auto lines = JsonLines(r.out);
  ASSERT_EQ(lines.size(), 5u);  // one output line per input line, errors included
  EXPECT_EQ(lines[0]["text"], "Hello world");
  EXPECT_EQ(lines[1]["text"], "");
  EXPECT_TRUE(lines[2].contains("error"));
  EXPECT_NE(lines[3]["error"].get<std::string>().find("not in the vocabulary"), std::string::npos);
  EXPECT_TRUE(lines[4].contains("error"));
  EXPECT_NE(r.err.find("line 3"), std::string::npos) << r.err;

  // Invalid UTF-8 inside a line is rejected, not replaced.
  const std::string bad = WriteScratch(d, "bad.jsonl", std::string("\"ab\xff\"\n\"ok\"\n"));
  auto b = RunBinary("tokenize --tokenizer " + testing::TestData("tokenizers/qwen3") + " < " + bad, d.path());
  EXPECT_EQ(b.exit_code, 1);
  auto blines = JsonLines(b.out);
  ASSERT_EQ(blines.size(), 2u);
  EXPECT_TRUE(blines[0].contains("error"));
  EXPECT_EQ(blines[1]["ids"], nlohmann::json({562}));

  auto missing = RunBinary("tokenize --tokenizer " + d.path() + "/nope < " + in, d.path());
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("not found"), std::string::npos) << missing.err;
}

TEST(Cli, ChatTemplateRendersAndReportsTemplateErrors) {
  ScratchDir d;
  const std::string msgs = WriteScratch(d, "m.json", R"([{"role":"user","content":"Hi"}])");
  auto r = RunBinary("chat-template --template " + testing::TestData("chat_templates/google-gemma-2-2b-it.jinja") +
                         " --add-generation-prompt --bos-token '<bos>' < " + msgs,
                     d.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");

  const std::string sys =
      WriteScratch(d, "s.json", R"([{"role":"system","content":"S"},{"role":"user","content":"Hi"}])");
  auto e = RunBinary(
      "chat-template --template " + testing::TestData("chat_templates/google-gemma-2-2b-it.jinja") + " < " + sys,
      d.path());
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_NE(e.err.find("System role not supported"), std::string::npos) << e.err;

  // --var values are JSON when they parse as JSON.
  const std::string t = WriteScratch(d, "t.jinja", "{{ date_string }}|{{ n + 1 }}|{{ messages | length }}");
  auto v =
      RunBinary("chat-template --template " + t + " --var date_string='1 Jan 2025' --var n=41 < " + msgs, d.path());
  ASSERT_EQ(v.exit_code, 0) << v.err;
  EXPECT_EQ(v.out, "1 Jan 2025|42|1");

  const std::string broken = WriteScratch(d, "b.jinja", "line one\n{% for x in messages %}");
  auto p = RunBinary("chat-template --template " + broken + " < " + msgs, d.path());
  EXPECT_EQ(p.exit_code, 1);
  EXPECT_NE(p.err.find("endfor"), std::string::npos) << p.err;

  auto cfg =
      RunBinary("chat-template --tokenizer-config " + testing::TestData("tokenizers/llama3/tokenizer_config.json") +
                    " --add-generation-prompt < " + msgs,
                d.path());
  ASSERT_EQ(cfg.exit_code, 0) << cfg.err;
  EXPECT_EQ(cfg.out.rfind("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", 0), 0u)
      << cfg.out;
}

}  // namespace
}  // namespace ropeserve

namespace ropeserve {
namespace {

// `ropeserve qa` and `encode` on a generated span model: one answer line per
// input line, an error line (and exit 1) for bad input; encode's fast and
// reference paths agree.
TEST(Cli, QaAndEncode) {
  ScratchDir d;
  const std::string model = d.path() + "/qa";
  ASSERT_EQ(RunBinary("make-model --qa --out " + model, d.path()).exit_code, 0);
  const std::string in = d.path() + "/in.jsonl";
  const std::string context = "the fox jumps over the dog near the river";
  std::ofstream(in) << nlohmann::json{{"question", "where"}, {"context", context}}.dump() << "\n"
                    << "{\"question\": 1}\n";
  auto r = RunBinary("qa --model " + model + " --top-k 2 < " + in, d.path());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  std::istringstream lines(r.out);
  std::string first, second;
  std::getline(lines, first);
  std::getline(lines, second);
  auto a = nlohmann::json::parse(first);
  ASSERT_TRUE(a.contains("answers")) << first;
  ASSERT_GE(a["answers"].size(), 1u);
  for (const auto& x : a["answers"])
    EXPECT_EQ(context.substr(x["start"].get<size_t>(), x["end"].get<size_t>() - x["start"].get<size_t>()),
              x["text"].get<std::string>());
  EXPECT_NE(second.find("error"), std::string::npos) << second;

  const std::string ids = d.path() + "/ids.jsonl";
  std::ofstream(ids) << "{\"ids\": [509, 3, 44, 200, 510, 7, 8, 510]}\n";
  auto fast = RunBinary("encode --model " + model + " < " + ids, d.path());
  auto ref = RunBinary("encode --reference --model " + model + " < " + ids, d.path());
  ASSERT_EQ(fast.exit_code, 0) << fast.err;
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  auto jf = nlohmann::json::parse(fast.out), jr = nlohmann::json::parse(ref.out);
  ASSERT_EQ(jf["start_logits"].size(), 8u);
  for (size_t i = 0; i < 8; ++i)
    EXPECT_NEAR(jf["start_logits"][i].get<double>(), jr["start_logits"][i].get<double>(), 1e-4);
  EXPECT_NE(RunBinary("qa --model " + d.path() + "/missing < " + in, d.path()).exit_code, 0);

  // One input from the flags, as the issue's interface: a decoder span head.
  const std::string llama = d.path() + "/llama-qa";
  ASSERT_EQ(RunBinary("make-model --qa --qa-arch llama --out " + llama, d.path()).exit_code, 0);
  auto q =
      RunBinary("qa --model " + llama + " --question where --context '" + context + "' --top-k 2 --json", d.path());
  ASSERT_EQ(q.exit_code, 0) << q.err;
  auto qj = nlohmann::json::parse(q.out);
  ASSERT_EQ(qj["answers"].size(), 2u) << q.out;
  for (const auto& x : qj["answers"])
    EXPECT_EQ(context.substr(x["start"].get<size_t>(), x["end"].get<size_t>() - x["start"].get<size_t>()),
              x["text"].get<std::string>());
  auto e = RunBinary("encode --model " + llama + " --input-ids 5,6,7,8 --json", d.path());
  ASSERT_EQ(e.exit_code, 0) << e.err;
  auto ej = nlohmann::json::parse(e.out);
  ASSERT_EQ(ej["last_hidden_state"].size(), 4u);
  EXPECT_EQ(ej["last_hidden_state"][0].size(), 64u);  // the generator's hidden size
  EXPECT_EQ(ej["start_logits"].size(), 4u);
  EXPECT_NE(RunBinary("encode --model " + llama + " --input-ids 5,-1", d.path()).exit_code, 0);
  // A decoder trunk's reference window is test code: a clear error.
  auto no_ref = RunBinary("encode --reference --model " + llama + " --input-ids 5,6 --json", d.path());
  EXPECT_EQ(no_ref.exit_code, 1);
  EXPECT_NE(no_ref.err.find("test suite only"), std::string::npos) << no_ref.err;
  EXPECT_NE(RunBinary("qa --model " + llama + " --question where", d.path()).exit_code, 0);
  // --device: the span model's device; a CPU-only build, or a CUDA build on a
  // machine without a GPU, refuses CUDA with the reason.
  auto on_cpu = RunBinary("encode --device cpu --model " + llama + " --input-ids 5,6,7,8 --json", d.path());
  ASSERT_EQ(on_cpu.exit_code, 0) << on_cpu.err;
  EXPECT_EQ(nlohmann::json::parse(on_cpu.out), ej);
  for (const char* cmd : {"encode --input-ids 5,6", "qa --question where --context here"}) {
    auto cuda = RunBinary(std::string(cmd) + " --device cuda --model " + llama, d.path());
    EXPECT_EQ(cuda.exit_code, 1) << cmd;
    EXPECT_TRUE(cuda.err.find("CPU workers only") != std::string::npos ||
                cuda.err.find("no CUDA GPU is visible") != std::string::npos)
        << cmd << ": " << cuda.err;
  }
  EXPECT_NE(RunBinary("encode --device tpu --model " + llama + " --input-ids 5,6", d.path()).exit_code, 0);
}

}  // namespace
}  // namespace ropeserve

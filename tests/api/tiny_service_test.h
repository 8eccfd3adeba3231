// Base of the API tests' fixtures: a tiny generated checkpoint served by a
// GenerationService (16 MB of KV cache) with its tokenizer, published in a
// ServingContext that a transport (HTTP, gRPC) then serves.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>

#include "server/api/serving_context.h"
#include "server/models/decoder.h"
#include "server/service/generation_service.h"
#include "server/serving/service_factory.h"
#include "server/tokenizer/tokenizer.h"
#include "tests/checkpoint/test_checkpoints.h"

namespace ropeserve {

// A tiny qwen2 checkpoint whose chat template opens a <think> block in the
// generation prompt (as Qwen3 thinking templates do): a random model never
// closes it, so all of its output is reasoning. Served without a
// ServingContext; a failure fails the calling test (check
// HasFatalFailure() after).
struct ReasoningService {
  testing::ScratchDir dir;
  std::unique_ptr<DecoderModel> model;
  std::unique_ptr<service::GenerationService> service;

  void Start() {
    testing::MakeTinyCheckpoint(dir.path(), testing::TinyOptions("qwen2"));
    const std::string cfg_path = dir.path() + "/tokenizer_config.json";
    std::ifstream in(cfg_path);
    nlohmann::json cfg = nlohmann::json::parse(in);
    cfg["chat_template"] = cfg["chat_template"].get<std::string>() +
                           "{% if add_generation_prompt %}<think>\n{% endif %}{# closed by </think> #}";
    testing::WriteFile(cfg_path, cfg.dump());
    auto m = DecoderModel::Load(dir.path(), DType::kF32);
    ASSERT_TRUE(m.ok());
    model = std::move(m).value();
    auto tok = tok::Tokenizer::FromPath(dir.path());
    ASSERT_TRUE(tok.ok());
    service::EngineOptions eo;
    eo.kv_cache_memory = "8M";
    auto svc = ServeDecoder(*model, "tiny", eo, *tok);
    ASSERT_TRUE(svc.ok());
    service = std::move(svc).value();
    ASSERT_TRUE(service->reasons());
  }
};

class TinyServiceTest : public ::testing::Test {
 protected:
  // A failure fails the calling test (check HasFatalFailure() after).
  void StartService(const char* arch) {
    testing::MakeTinyCheckpoint(dir_.path(), testing::TinyOptions(arch));
    auto m = DecoderModel::Load(dir_.path(), DType::kF32);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value();
    service::EngineOptions eo;
    eo.kv_cache_memory = "16M";
    auto tok = tok::Tokenizer::FromPath(dir_.path());
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    tokenizer_ = *tok;
    auto svc = ServeDecoder(*model_, "tiny", eo, tokenizer_);
    ASSERT_TRUE(svc.ok()) << svc.status().ToString();
    service_ = std::move(svc).value();
    ctx_.service = service_.get();
    ctx_.lifecycle.SetReady();
  }

  testing::ScratchDir dir_;
  std::unique_ptr<DecoderModel> model_;
  std::shared_ptr<const tok::Tokenizer> tokenizer_;
  std::unique_ptr<service::GenerationService> service_;
  api::ServingContext ctx_;
};

}  // namespace ropeserve

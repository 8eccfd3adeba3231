// Base of the API tests' fixtures: a tiny generated checkpoint served by a
// GenerationService (16 MB of KV cache) with its tokenizer, published in a
// ServingContext that a transport (HTTP, gRPC) then serves.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "server/api/serving_context.h"
#include "server/models/decoder.h"
#include "server/service/generation_service.h"
#include "server/serving/service_factory.h"
#include "server/tokenizer/tokenizer.h"
#include "tests/checkpoint/test_checkpoints.h"

namespace ropeserve {

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

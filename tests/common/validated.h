// A test's generation options, made as a request's are: by the request
// validator (ValidateGeneration, the only maker of a ValidatedGeneration)
// against the service's limits, with gRPC Generate's defaults (greedy,
// max_tokens 16 unless set). Torch-free.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "server/service/generation_service.h"
#include "server/service/request_params.h"

namespace ropeserve::testing {

// Options for prompts of `prompt_lengths` tokens (their count is what
// --max-request-tokens weighs). A refusal fails the calling test.
inline service::ValidatedGeneration Validated(const service::GenerationService& service,
                                              const service::GenerationFields& fields,
                                              const std::vector<std::size_t>& prompt_lengths) {
  auto v = service::ValidateGeneration(fields, service::Endpoint::kGenerate, prompt_lengths, service.limits());
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  if (v.ok()) return *v;
  // The caller's test has failed; options valid for any short prompt let
  // it run on to its own checks without a crash.
  return *service::ValidateGeneration({}, service::Endpoint::kGenerate, {1}, service.limits());
}

// Options for one prompt of `prompt_length` tokens.
inline service::ValidatedGeneration Validated(const service::GenerationService& service,
                                              const service::GenerationFields& fields, std::size_t prompt_length) {
  return Validated(service, fields, std::vector<std::size_t>{prompt_length});
}

}  // namespace ropeserve::testing

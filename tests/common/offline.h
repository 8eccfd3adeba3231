// Offline generation through the serving path (the engine stepped on the
// test's thread), for tests that compare against it.
#pragma once

#include <memory>
#include <vector>

#include "server/serving/service_factory.h"
#include "tests/common/validated.h"

namespace ropeserve::testing {

// `fields` are validated as gRPC Generate's are (greedy, max_tokens 16
// unless set). Fails the test's status check when the engine cannot be
// built.
inline StatusOr<GenerateResult> OfflineGenerate(const DecoderModel& model, const std::vector<std::int64_t>& prompt,
                                                const service::GenerationFields& fields, OfflineOptions offline = {}) {
  RS_ASSIGN_OR_RETURN(auto service, OfflineDecoder(model, offline));
  return service->Generate(prompt, Validated(*service, fields, prompt.size()));
}

}  // namespace ropeserve::testing

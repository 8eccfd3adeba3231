// Offline generation through the serving path (the engine stepped on the
// test's thread), for tests that compare against it.
#pragma once

#include <memory>
#include <vector>

#include "server/serving/service_factory.h"

namespace ropeserve::testing {

// Fails the test's status check when the engine cannot be built.
inline StatusOr<GenerateResult> OfflineGenerate(const DecoderModel& model, const std::vector<std::int64_t>& prompt,
                                                const GenerateOptions& options, OfflineOptions offline = {}) {
  RS_ASSIGN_OR_RETURN(auto service, OfflineDecoder(model, offline));
  return service->Generate(prompt, options);
}

}  // namespace ropeserve::testing

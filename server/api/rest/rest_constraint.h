// Reading a REST body's structured-output fields (OpenAI's
// response_format, vLLM's guided_json / guided_regex / guided_choice and its
// structured_outputs object) into one structured::Constraint. Part of the
// REST readers (server/api/rest/rest_request.h); torch-free and model-free.
#pragma once

#include <nlohmann/json.hpp>

#include "server/common/status.h"
#include "server/structured/constraint.h"

namespace ropeserve::api {

// At most one of the fields may ask for a constraint; MalformedRequest
// naming the field for a wrong shape, two at once, or grammar /
// structural_tag (unsupported_parameter). None given: `c` is left as is.
Status ReadConstraint(const nlohmann::ordered_json& body, structured::Constraint& c);

}  // namespace ropeserve::api

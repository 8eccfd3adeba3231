#include "server/common/json_file.h"

#include <fstream>
#include <sstream>

namespace ropeserve {

StatusOr<nlohmann::json> ReadJsonObjectFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(path + ": malformed JSON");
  if (!j.is_object()) return InvalidArgument(path + ": top level is not a JSON object");
  return j;
}

}  // namespace ropeserve

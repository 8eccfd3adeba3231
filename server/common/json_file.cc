#include "server/common/json_file.h"

#include <fstream>
#include <sstream>

namespace ropeserve {

StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

StatusOr<nlohmann::json> ReadJsonObjectFile(const std::string& path) {
  RS_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(path + ": malformed JSON");
  if (!j.is_object()) return InvalidArgument(path + ": top level is not a JSON object");
  return j;
}

}  // namespace ropeserve

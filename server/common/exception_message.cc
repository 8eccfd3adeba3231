#include "server/common/exception_message.h"

namespace ropeserve {

std::string ExceptionMessage(const std::exception& e) {
  std::string m = e.what();
  if (const auto at = m.find("\nException raised from"); at != std::string::npos) m.resize(at);
  if (m.size() > 1000) m = m.substr(0, 1000) + "...";
  return m;
}

}  // namespace ropeserve

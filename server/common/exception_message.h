// An exception's message fit for a client and a log line.
#pragma once

#include <exception>
#include <string>

namespace ropeserve {

// e.what(), but LibTorch's messages (c10::Error) carry a stack trace after
// "\nException raised from", which is cut off, as is anything past 1000
// bytes.
std::string ExceptionMessage(const std::exception& e);

}  // namespace ropeserve

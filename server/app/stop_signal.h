// How `serve` learns that it should stop: SIGTERM or SIGINT starts the
// drain (Wait returns true), a second signal exits at once (128 + the
// signal), and the server itself may ask to stop (Request: a listener
// failed). SIGPIPE is ignored.
//
// The signals reach a handler that writes them to a pipe (write() is
// async-signal-safe), and one thread reads the pipe. Blocking them for
// sigwait is not enough: threads that libraries started before this point,
// such as a CUDA LibTorch's, would keep them unblocked, and a signal
// delivered to one of those takes its default action, which PID 1 in a
// container ignores.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "server/common/status.h"

namespace ropeserve::app {

class StopSignal {
 public:
  // Installs the handlers and starts the thread that reads the pipe (once
  // per process; the object must outlive the server).
  Status Install();
  void Request();
  // True once a stop was requested; false after `timeout` without one.
  bool Wait(std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool requested_ = false;
};

}  // namespace ropeserve::app

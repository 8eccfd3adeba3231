#include "server/app/stop_signal.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <thread>

namespace ropeserve::app {

namespace {

// The stop signals' self-pipe: the handler only write()s.
int g_stop_pipe[2] = {-1, -1};

extern "C" void WriteStopSignal(int sig) {
  const int saved = errno;
  const auto byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = write(g_stop_pipe[1], &byte, 1);
  errno = saved;
}

// Blocks until a stop signal arrives; returns its number.
int ReadStopSignal() {
  unsigned char byte = 0;
  for (;;) {
    const ssize_t n = read(g_stop_pipe[0], &byte, 1);
    if (n == 1) return byte;
    if (n < 0 && errno == EINTR) continue;
    pause();  // the pipe failed: wait without spinning
  }
}

}  // namespace

Status StopSignal::Install() {
  std::signal(SIGPIPE, SIG_IGN);
  if (pipe2(g_stop_pipe, O_CLOEXEC) != 0) return Internal("cannot create the signal pipe");
  struct sigaction on_stop {};
  on_stop.sa_handler = WriteStopSignal;
  sigemptyset(&on_stop.sa_mask);
  on_stop.sa_flags = SA_RESTART;
  sigaction(SIGINT, &on_stop, nullptr);
  sigaction(SIGTERM, &on_stop, nullptr);
  std::thread([this] {
    const int sig = ReadStopSignal();
    spdlog::info("received {}, draining (a second signal exits at once)", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    Request();
    const int second = ReadStopSignal();
    spdlog::warn("second signal: exiting now");
    std::_Exit(128 + second);
  }).detach();
  return Status::Ok();
}

void StopSignal::Request() {
  std::lock_guard<std::mutex> lock(mu_);
  requested_ = true;
  cv_.notify_all();
}

bool StopSignal::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return requested_; });
}

}  // namespace ropeserve::app

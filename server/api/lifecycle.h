// The serving state shared by REST and gRPC: loading -> ready -> draining.
// While loading or draining, /ready answers 503 and gRPC health NOT_SERVING,
// and new work is refused with Unavailable; requests already admitted run to
// the end (a drain waits for them, bounded by --shutdown-timeout).
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "server/common/status.h"

namespace ropeserve::api {

class Lifecycle {
 public:
  enum class State { kLoading, kReady, kDraining };

  // Counts one admitted request for as long as it lives.
  class Ticket {
   public:
    Ticket() = default;
    explicit Ticket(Lifecycle* l) : owner_(l) {}
    Ticket(Ticket&& o) noexcept : owner_(o.owner_) { o.owner_ = nullptr; }
    Ticket& operator=(Ticket&& o) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { Release(); }

   private:
    void Release();
    Lifecycle* owner_ = nullptr;
  };

  State state() const { return state_.load(); }
  bool ready() const { return state() == State::kReady; }
  void SetReady();
  void StartDraining();

  // A ticket while ready; Unavailable ("loading" / "shutting down") otherwise.
  StatusOr<Ticket> Admit();
  int in_flight() const { return in_flight_.load(); }
  // Waits until no admitted request is left; false on timeout.
  bool WaitIdle(std::chrono::milliseconds timeout);

 private:
  std::atomic<State> state_{State::kLoading};
  std::atomic<int> in_flight_{0};
  std::mutex mu_;
  std::condition_variable idle_cv_;
};

}  // namespace ropeserve::api

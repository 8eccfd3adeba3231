#include "server/api/lifecycle.h"

namespace ropeserve::api {

Lifecycle::Ticket& Lifecycle::Ticket::operator=(Ticket&& o) noexcept {
  if (this != &o) {
    Release();
    owner_ = o.owner_;
    o.owner_ = nullptr;
  }
  return *this;
}

void Lifecycle::Ticket::Release() {
  if (owner_ == nullptr) return;
  Lifecycle* l = owner_;
  owner_ = nullptr;
  std::lock_guard<std::mutex> lock(l->mu_);
  if (--l->in_flight_ == 0) l->idle_cv_.notify_all();
}

void Lifecycle::SetReady() {
  State expected = State::kLoading;
  state_.compare_exchange_strong(expected, State::kReady);
}

void Lifecycle::StartDraining() { state_ = State::kDraining; }

StatusOr<Lifecycle::Ticket> Lifecycle::Admit() {
  std::lock_guard<std::mutex> lock(mu_);
  switch (state_.load()) {
    case State::kLoading:
      return Unavailable("the server is still loading its models");
    case State::kDraining:
      return Unavailable("the server is shutting down");
    case State::kReady:
      break;
  }
  ++in_flight_;
  return Ticket(this);
}

bool Lifecycle::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [&] { return in_flight_.load() == 0; });
}

}  // namespace ropeserve::api

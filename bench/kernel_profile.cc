#include "bench/kernel_profile.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace ropeserve::bench {
namespace {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

// KinetoEvent's duration: durationNs() since LibTorch 2.x, durationUs() in 1.13.
template <typename E>
auto DurationNs(const E& e, int /*prefer*/) -> decltype(static_cast<double>(e.durationNs())) {
  return static_cast<double>(e.durationNs());
}
template <typename E>
auto DurationNs(const E& e, long /*fallback*/) -> decltype(static_cast<double>(e.durationUs())) {
  return 1e3 * static_cast<double>(e.durationUs());
}

std::vector<KernelTotal> Sorted(const std::map<std::string, KernelTotal>& by_name) {
  std::vector<KernelTotal> out;
  for (const auto& [name, total] : by_name) out.push_back(total);
  std::sort(out.begin(), out.end(), [](const KernelTotal& a, const KernelTotal& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace

StatusOr<std::vector<KernelTotal>> ProfileDeviceKernels(const std::function<Status()>& body) {
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
  const std::set<impl::ActivityType> activities{impl::ActivityType::CPU, impl::ActivityType::CUDA};
  std::unique_ptr<prof::ProfilerResult> result;
  try {
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
  } catch (const std::exception& e) {
    return FailedPrecondition(std::string("this LibTorch cannot profile the device: ") + e.what());
  }
  Status status = body();
  try {
    result = prof::disableProfiler();
  } catch (const std::exception& e) {
    return Internal(std::string("the profiler failed: ") + e.what());
  }
  if (!status.ok()) return status;
  std::map<std::string, KernelTotal> by_name;
  for (const auto& e : result->events()) {
    if (e.deviceType() == c10::DeviceType::CPU) continue;  // operators and runtime calls
    KernelTotal& t = by_name[e.name()];
    t.name = e.name();
    ++t.calls;
    t.ms += 1e-6 * DurationNs(e, 0);
  }
  return Sorted(by_name);
}

std::vector<KernelTotal> KernelDifference(const std::vector<KernelTotal>& longer,
                                          const std::vector<KernelTotal>& shorter) {
  std::map<std::string, KernelTotal> by_name;
  for (const auto& t : longer) by_name[t.name] = t;
  for (const auto& t : shorter) {
    auto it = by_name.find(t.name);
    if (it == by_name.end()) continue;
    it->second.calls -= t.calls;
    it->second.ms -= t.ms;
  }
  for (auto it = by_name.begin(); it != by_name.end();) {
    if (it->second.calls <= 0) {
      it = by_name.erase(it);
    } else {
      it->second.ms = std::max(0.0, it->second.ms);
      ++it;
    }
  }
  return Sorted(by_name);
}

}  // namespace ropeserve::bench

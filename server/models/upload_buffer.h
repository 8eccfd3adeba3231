// A persistent buffer of T on a device and its host staging buffer (pinned
// on a GPU; on the CPU the two are one tensor and nothing is copied): the
// runner's way to hand the device a step's inputs in one asynchronous copy.
// Writing the staging buffer waits for its previous copy to have been read
// (an event; usually long done, since most steps end by waiting for their
// results). Threading: the runner's thread only.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <thread>

namespace ropeserve {

template <typename T>
class UploadBuffer {
 public:
  UploadBuffer(std::int64_t capacity, at::Device device) : device_(device) {
    if (!device.is_cpu()) copied_.emplace(device.type());
    Allocate(std::max<std::int64_t>(1, capacity));
  }

  // Room for n entries; grows (new addresses, contents lost) when short.
  // True when it grew.
  bool Reserve(std::int64_t n) {
    if (n <= capacity_) return false;
    WaitForCopy();
    Allocate(std::max(n, 2 * capacity_));
    return true;
  }
  // The staging buffer, to be written.
  T* host() {
    WaitForCopy();
    return host_.template data_ptr<T>();
  }
  // Entries [0, n) on the device, in one asynchronous copy on the current
  // stream (none on the CPU).
  at::Tensor Upload(std::int64_t n) {
    if (device_.is_cpu()) return host_.narrow(0, 0, n);
    at::Tensor on_device = device_buffer_.narrow(0, 0, n);
    on_device.copy_(host_.narrow(0, 0, n), /*non_blocking=*/true);
    copied_->record(c10::impl::VirtualGuardImpl(device_.type()).getStream(device_));
    return on_device;
  }
  const void* host_address() const { return host_.data_ptr(); }
  const void* device_address() const { return device_buffer_.data_ptr(); }

 private:
  void WaitForCopy() {
    if (copied_.has_value())
      while (!copied_->query()) std::this_thread::yield();
  }
  void Allocate(std::int64_t capacity) {
    capacity_ = capacity;
    const auto opts = at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value);
    host_ = at::empty({capacity}, opts.pinned_memory(device_.is_cuda()));
    device_buffer_ = device_.is_cpu() ? host_ : at::empty({capacity}, opts.device(device_));
  }

  const at::Device device_;
  std::int64_t capacity_ = 0;
  at::Tensor host_, device_buffer_;
  std::optional<c10::Event> copied_;  // the last copy (devices only)
};

}  // namespace ropeserve

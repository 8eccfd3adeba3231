#include "server/models/device.h"

#include <cstddef>
#include <string>

namespace ropeserve {

Status CheckDeviceUsable(const at::Device& device) {
  if (!device.is_cuda()) return Status::Ok();
  const std::size_t gpus = at::hasCUDA() ? at::getNumGPUs() : 0;
  if (gpus == 0) return FailedPrecondition("device '" + device.str() + "': no CUDA GPU is visible to this process");
  if (device.has_index() && static_cast<std::size_t>(device.index()) >= gpus)
    return InvalidArgument("device '" + device.str() + "': this process sees " + std::to_string(gpus) + " CUDA GPU(s)");
  at::globalContext().setUserEnabledCuDNN(false);
  return Status::Ok();
}

}  // namespace ropeserve

// libFuzzer target: arbitrary checkpoint files: config.json of causal LMs
// and of span models, and whole safetensors files (the 8-byte header
// length, the JSON header, offsets against the data). Errors are fine;
// crashes, hangs and leaks are not.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "server/checkpoint/encoder_config.h"
#include "server/checkpoint/model_config.h"
#include "server/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      (void)ropeserve::ParseModelConfig(rest, "config.json");
      break;
    case 1:
      (void)ropeserve::ParseEncoderConfig(rest, "config.json");
      break;
    default: {
      // A real file (memory-mapped by the loader), without touching the disk.
      const int fd = memfd_create("model.safetensors", 0);
      if (fd < 0) return 0;
      if (write(fd, rest.data(), rest.size()) == static_cast<ssize_t>(rest.size())) {
        auto f = ropeserve::SafetensorsFile::Open("/proc/self/fd/" + std::to_string(fd));
        if (f.ok()) {
          volatile std::uint8_t sink = 0;
          for (const auto& [name, info] : (*f)->tensors())
            if (info.end > info.begin) sink = sink ^ (*f)->Data(info)[info.end - info.begin - 1];
        }
      }
      close(fd);
      break;
    }
  }
  return 0;
}

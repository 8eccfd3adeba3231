#include "server/runner/kv_tier.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#ifdef ROPESERVE_HAVE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ropeserve {

namespace {

// `bytes` of a new file in `directory`, reserved on the disk and mapped
// shared; the file is unlinked at once (its blocks go when the mapping
// does). The mapping is unmapped when the last tensor over it goes.
std::shared_ptr<std::byte> MapTierFile(const std::string& directory, std::int64_t bytes) {
  std::string path = directory + "/ropeserve-kv-tier-XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) throw std::runtime_error("cannot create a file in " + directory + ": " + std::strerror(errno));
  unlink(path.c_str());
  const int reserved = posix_fallocate(fd, 0, bytes);
  if (reserved != 0) {
    close(fd);
    throw std::runtime_error("cannot reserve " + std::to_string(bytes) + " bytes in " + directory + ": " +
                             std::strerror(reserved));
  }
  void* addr = mmap(nullptr, static_cast<std::size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int mapped_errno = errno;
  close(fd);
  if (addr == MAP_FAILED)
    throw std::runtime_error("cannot map " + std::to_string(bytes) + " bytes of " + directory + ": " +
                             std::strerror(mapped_errno));
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(addr),
                                    [bytes](std::byte* p) { munmap(p, static_cast<std::size_t>(bytes)); });
}

// The pairs' first and second members as int64 index tensors.
std::pair<at::Tensor, at::Tensor> Indices(std::span<const std::pair<std::int64_t, std::int64_t>> pairs) {
  std::vector<std::int64_t> a, b;
  for (const auto& [x, y] : pairs) {
    a.push_back(x);
    b.push_back(y);
  }
  return {at::tensor(a, at::kLong), at::tensor(b, at::kLong)};
}

// Rows `from` of every layer's K and V in `src` into rows `to` of `dst`'s
// (host tensors: the CPU cache and the tier).
void CopyBlocks(const PagedKvCache& src, const at::Tensor& from, const PagedKvCache& dst, const at::Tensor& to) {
  for (std::size_t l = 0; l < src.k.size(); ++l) {
    dst.k[l].index_copy_(0, to, src.k[l].index_select(0, from));
    dst.v[l].index_copy_(0, to, src.v[l].index_select(0, from));
  }
}

}  // namespace

#ifdef ROPESERVE_HAVE_CUDA
struct KvTier::Stream {
  c10::cuda::CUDAStream stream;
};
#else
struct KvTier::Stream {};
#endif

KvTier::KvTier(const PagedKvCache& cache, std::int64_t num_slots, const std::string& directory) {
  const bool pin = !cache.k.empty() && !cache.k[0].is_cpu();
  if (!directory.empty() && pin) throw std::runtime_error("a tier in a file is for CPU workers");
  std::vector<const at::Tensor*> tensors;  // K then V of each layer
  std::int64_t bytes = 0;
  for (std::size_t l = 0; l < cache.k.size(); ++l) {
    for (const at::Tensor* from : {&cache.k[l], &cache.v[l]}) {
      tensors.push_back(from);
      bytes += from->numel() / from->size(0) * num_slots * static_cast<std::int64_t>(from->element_size());
    }
  }
  const std::shared_ptr<std::byte> file = directory.empty() ? nullptr : MapTierFile(directory, bytes);
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    std::vector<std::int64_t> shape = tensors[i]->sizes().vec();
    shape[0] = num_slots;
    const at::TensorOptions options = tensors[i]->options().device(at::kCPU);
    at::Tensor t;
    if (file != nullptr) {
      t = at::from_blob(
          file.get() + offset, shape, [file](void*) {}, options);
      offset += t.numel() * static_cast<std::int64_t>(t.element_size());
    } else {
      t = at::empty(shape, options.pinned_memory(pin));
    }
    (i % 2 == 0 ? slots_.k : slots_.v).push_back(t);
  }
}

KvTier::~KvTier() = default;

void KvTier::Save(const PagedKvCache& cache, std::span<const std::pair<std::int64_t, std::int64_t>> block_slot) {
  if (block_slot.empty()) return;
  if (!cache.k.empty() && cache.k[0].is_cuda()) return CopyOnItsStream(cache, block_slot, /*save=*/true);
  auto [blocks, slots] = Indices(block_slot);
  CopyBlocks(cache, blocks, slots_, slots);
}

void KvTier::Load(PagedKvCache& cache, std::span<const std::pair<std::int64_t, std::int64_t>> block_slot) {
  if (block_slot.empty()) return;
  if (!cache.k.empty() && cache.k[0].is_cuda()) return CopyOnItsStream(cache, block_slot, /*save=*/false);
  auto [blocks, slots] = Indices(block_slot);
  CopyBlocks(slots_, slots, cache, blocks);
}

#ifdef ROPESERVE_HAVE_CUDA

// The tier's copies run on a stream of their own and the host does not wait
// for them: that stream first waits for everything the compute stream has
// queued (the forward that wrote the blocks being saved), copies runs of
// consecutive blocks between the cache and the pinned tier
// (cudaMemcpyAsync), and the compute stream waits for the copies before its
// next kernel (a forward that overwrites a saved block or reads a loaded
// one). One tier stream keeps the copies in the order they were asked for,
// so a slot saved over after a load from it is read first. A copy that
// fails asynchronously surfaces as the next forward's CUDA error.
void KvTier::CopyOnItsStream(const PagedKvCache& cache,
                             std::span<const std::pair<std::int64_t, std::int64_t>> block_slot, bool save) {
  const c10::DeviceIndex index = cache.k[0].device().index();
  const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(index);
  if (!stream_) stream_.reset(new Stream{c10::cuda::getStreamFromPool(false, index)});
  at::cuda::CUDAEvent queued, copied;
  queued.record(compute);
  queued.block(stream_->stream);
  {
    const c10::cuda::CUDAStreamGuard on_tier(stream_->stream);
    for (std::size_t i = 0; i < block_slot.size();) {
      std::size_t n = 1;  // a run: blocks and slots both consecutive
      while (i + n < block_slot.size() &&
             block_slot[i + n].first == block_slot[i].first + static_cast<std::int64_t>(n) &&
             block_slot[i + n].second == block_slot[i].second + static_cast<std::int64_t>(n))
        ++n;
      const auto [block, slot] = block_slot[i];
      for (std::size_t l = 0; l < cache.k.size(); ++l) {
        for (auto [c, t] : {std::pair{&cache.k[l], &slots_.k[l]}, std::pair{&cache.v[l], &slots_.v[l]}}) {
          at::Tensor on_device = c->narrow(0, block, static_cast<std::int64_t>(n));
          at::Tensor on_host = t->narrow(0, slot, static_cast<std::int64_t>(n));
          if (save)
            on_host.copy_(on_device, /*non_blocking=*/true);
          else
            on_device.copy_(on_host, /*non_blocking=*/true);
        }
      }
      i += n;
    }
  }
  copied.record(stream_->stream);
  copied.block(compute);
}

#else

void KvTier::CopyOnItsStream(const PagedKvCache&, std::span<const std::pair<std::int64_t, std::int64_t>>, bool) {
  throw std::logic_error("a CUDA device in a build without CUDA");
}

#endif  // ROPESERVE_HAVE_CUDA

}  // namespace ropeserve

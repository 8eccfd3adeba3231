// Reading and writing the safetensors format
// (8-byte little-endian header length, JSON header, raw little-endian data).
//
// The reader memory-maps the file and validates the whole header before any
// tensor is touched, so a damaged file yields a Status naming the file and
// the tensor, never a crash. Torch-free: the model loader turns the returned
// byte ranges into tensors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/checkpoint/dtype.h"
#include "server/common/status.h"

namespace ropeserve {

// A read-only memory mapping of a whole file; unmapped in the destructor.
class MappedFile {
 public:
  static StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets into the data section, half-open
  std::uint64_t end = 0;
  std::int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Maps and validates `path`. Errors: NotFound, DataLoss (truncated file,
  // offsets past the end), InvalidArgument (malformed header, overlapping
  // ranges, sizes that disagree with shapes), Unimplemented (unknown dtype).
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* Find(const std::string& name) const;
  // Start of a tensor's bytes inside the mapping (no alignment guarantee).
  const std::uint8_t* Data(const TensorInfo& info) const { return data_start_ + info.begin; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::unique_ptr<MappedFile> file_;
  const std::uint8_t* data_start_ = nullptr;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Parses a header (the JSON text) against a data section of `data_size`
// bytes. Exposed for tests; Open() uses it.
StatusOr<std::map<std::string, TensorInfo>> ParseSafetensorsHeader(const std::string& json_text,
                                                                   std::uint64_t data_size,
                                                                   std::map<std::string, std::string>* metadata);

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;  // little-endian, numel * DTypeSize(dtype)
};

// Writes tensors in the given order (header padded to 8 bytes, as the
// reference writer does). Returns an error if the file cannot be written or
// a tensor's byte count disagrees with its shape.
Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace ropeserve

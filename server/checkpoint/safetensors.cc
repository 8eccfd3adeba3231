#include "server/checkpoint/safetensors.h"

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

namespace ropeserve {

using json = nlohmann::json;

namespace {
// The reference implementation refuses headers above 100 MB; so do we, so a
// corrupt length cannot make us allocate gigabytes.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

std::uint64_t ReadLE64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
}  // namespace

std::int64_t TensorInfo::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    return Status(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument,
                  path + ": cannot open: " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + ": not a regular file");
  }
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<std::size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return InvalidArgument(path + ": mmap failed: " + std::strerror(err));
    }
    f->data_ = static_cast<const std::uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::uint8_t*>(data_), size_);
}

StatusOr<std::map<std::string, TensorInfo>> ParseSafetensorsHeader(const std::string& json_text,
                                                                   std::uint64_t data_size,
                                                                   std::map<std::string, std::string>* metadata) {
  json header = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return InvalidArgument("malformed JSON header");
  if (!header.is_object()) return InvalidArgument("JSON header is not an object");

  std::map<std::string, TensorInfo> tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return InvalidArgument("__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) return InvalidArgument("__metadata__ value '" + k + "' is not a string");
        if (metadata) (*metadata)[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!entry.is_object()) return InvalidArgument(where + ": entry is not an object");
    auto dt = entry.find("dtype");
    auto sh = entry.find("shape");
    auto off = entry.find("data_offsets");
    if (dt == entry.end() || !dt->is_string()) return InvalidArgument(where + ": missing or non-string 'dtype'");
    if (sh == entry.end() || !sh->is_array()) return InvalidArgument(where + ": missing or non-array 'shape'");
    if (off == entry.end() || !off->is_array() || off->size() != 2)
      return InvalidArgument(where + ": 'data_offsets' must be an array of two integers");

    TensorInfo info;
    info.name = name;
    auto dtype = DTypeFromSafetensorsName(dt->get<std::string>());
    if (!dtype) return Unimplemented(where + ": unknown dtype '" + dt->get<std::string>() + "'");
    info.dtype = *dtype;

    // numel * element size, guarded against overflow (a zero dim makes it 0).
    bool has_zero = false, overflow = false;
    unsigned __int128 bytes = DTypeSize(info.dtype);
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) return InvalidArgument(where + ": shape has a non-integer or negative dimension");
      std::uint64_t dim = d.get<std::uint64_t>();
      if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        return InvalidArgument(where + ": dimension too large");
      info.shape.push_back(static_cast<std::int64_t>(dim));
      has_zero |= dim == 0;
      if (!overflow) {
        bytes *= dim;
        overflow = bytes > std::numeric_limits<std::uint64_t>::max();
      }
    }
    if (has_zero) bytes = 0, overflow = false;
    for (const auto& o : *off)
      if (!o.is_number_unsigned()) return InvalidArgument(where + ": data_offsets must be non-negative integers");
    info.begin = (*off)[0].get<std::uint64_t>();
    info.end = (*off)[1].get<std::uint64_t>();
    if (info.begin > info.end)
      return InvalidArgument(where + ": data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
                             "] end before they begin");
    if (info.end > data_size)
      return DataLoss(where + ": data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
                      "] run past the end of the data section (" + std::to_string(data_size) +
                      " bytes); is the file truncated?");
    if (overflow || bytes != static_cast<unsigned __int128>(info.end - info.begin))
      return InvalidArgument(
          where + ": data_offsets span " + std::to_string(info.end - info.begin) + " bytes but dtype " +
          DTypeSafetensorsName(info.dtype) + " and shape need " +
          (overflow ? std::string("more than 2^64") : std::to_string(static_cast<std::uint64_t>(bytes))));
    tensors.emplace(name, std::move(info));
  }

  // No two tensors may share bytes.
  std::vector<const TensorInfo*> order;
  for (const auto& [_, t] : tensors)
    if (t.end > t.begin) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < order.size(); ++i) {
    if (order[i]->begin < order[i - 1]->end)
      return InvalidArgument("tensors '" + order[i - 1]->name + "' and '" + order[i]->name +
                             "' have overlapping data_offsets");
  }
  return tensors;
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  RS_ASSIGN_OR_RETURN(auto mapped, MappedFile::Open(path));
  const std::size_t size = mapped->size();
  if (size < 8)
    return DataLoss(path + ": file is " + std::to_string(size) + " bytes, too short for the 8-byte header length");
  const std::uint64_t header_len = ReadLE64(mapped->data());
  if (header_len > size - 8)
    return DataLoss(path + ": header length " + std::to_string(header_len) + " runs past the end of the file (" +
                    std::to_string(size) + " bytes)");
  if (header_len > kMaxHeaderBytes)
    return InvalidArgument(path + ": header length " + std::to_string(header_len) + " exceeds 100 MB");

  std::string text(reinterpret_cast<const char*>(mapped->data() + 8), header_len);
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  auto parsed = ParseSafetensorsHeader(text, size - 8 - header_len, &f->metadata_);
  if (!parsed.ok()) return parsed.status().WithContext(path);
  f->tensors_ = std::move(parsed).value();
  f->data_start_ = mapped->data() + 8 + header_len;
  f->file_ = std::move(mapped);
  return f;
}

const TensorInfo* SafetensorsFile::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    std::uint64_t numel = 1;
    for (auto d : t.shape) numel *= static_cast<std::uint64_t>(d);
    if (numel * DTypeSize(t.dtype) != t.bytes.size())
      return InvalidArgument("tensor '" + t.name + "': byte count does not match shape");
    header[t.name] = {{"dtype", DTypeSafetensorsName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return InvalidArgument(path + ": cannot open for writing");
  std::uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<std::uint8_t>(text.size() >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& t : tensors)
    out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  out.close();
  if (!out) return InvalidArgument(path + ": write failed");
  return Status::Ok();
}

}  // namespace ropeserve

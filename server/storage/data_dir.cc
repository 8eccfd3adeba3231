#include "server/storage/data_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace ropeserve::storage {

namespace {

std::string Errno() { return std::strerror(errno); }

Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Internal("cannot open directory " + dir + ": " + Errno());
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Internal("cannot sync directory " + dir + ": " + Errno());
  return Status::Ok();
}

}  // namespace

Status MakeDirectories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return FailedPrecondition("cannot create directory " + path + ": " + ec.message());
  if (!std::filesystem::is_directory(path, ec)) return FailedPrecondition(path + " is not a directory");
  return Status::Ok();
}

std::string DataDir::Default() {
  if (const char* d = std::getenv("XDG_STATE_HOME"); d && *d) return std::string(d) + "/ropeserve";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.local/state/ropeserve";
  return "/tmp/ropeserve-state";
}

StatusOr<std::unique_ptr<DataDir>> DataDir::Open(const std::string& path) {
  if (path.empty()) return InvalidArgument("the data directory must not be empty");
  const bool existed = std::filesystem::exists(path);
  RS_RETURN_IF_ERROR(MakeDirectories(path));
  if (!existed) ::chmod(path.c_str(), 0700);  // what it holds is the users' data
  const std::string lock = path + "/lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return FailedPrecondition("cannot open " + lock + ": " + Errno());
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    ::close(fd);
    if (e == EWOULDBLOCK)
      return FailedPrecondition("the data directory " + path +
                                " is in use by another ropeserve process (give each server its own --data-dir)");
    return FailedPrecondition("cannot lock " + lock + ": " + std::strerror(e));
  }
  return std::unique_ptr<DataDir>(new DataDir(path, fd));
}

DataDir::~DataDir() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // closing releases the flock
}

std::string DataDir::Path(std::string_view name) const { return path_ + "/" + std::string(name); }

Status WriteFileAtomically(const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Internal("cannot create " + tmp + ": " + Errno());
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // ENOSPC (disk full) lands here: the old file is untouched.
      const std::string why = Errno();
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status(ErrorCode::kResourceExhausted, "cannot write " + path + ": " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = Errno();
    ::unlink(tmp.c_str());
    return Internal("cannot sync " + tmp + ": " + why);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = Errno();
    ::unlink(tmp.c_str());
    return Internal("cannot rename " + tmp + " to " + path + ": " + why);
  }
  return SyncParentDirectory(path);
}

Status SyncParentDirectory(const std::string& path) {
  return SyncDirectory(std::filesystem::path(path).parent_path().string());
}

}  // namespace ropeserve::storage

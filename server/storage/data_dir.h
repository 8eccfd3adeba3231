// The server's data directory (serve --data-dir): what must survive a
// restart (the Files and Batch APIs' database and file contents) lives
// here. Created 0700 on first use and held with an exclusive lock (flock
// on DIR/lock) for the process's life, so that a second server pointed at
// the same directory stops with a clear error instead of sharing it.
//
// Torch-free and model-free.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "server/common/status.h"

namespace ropeserve::storage {

class DataDir {
 public:
  // Creates `path` (and its parents) when missing and locks it.
  // FailedPrecondition naming the directory when another process holds it.
  static StatusOr<std::unique_ptr<DataDir>> Open(const std::string& path);
  // $XDG_STATE_HOME/ropeserve, else ~/.local/state/ropeserve, else
  // /tmp/ropeserve-state (no HOME).
  static std::string Default();
  ~DataDir();
  DataDir(const DataDir&) = delete;
  DataDir& operator=(const DataDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/name
  std::string Path(std::string_view name) const;

 private:
  DataDir(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  std::string path_;
  int lock_fd_ = -1;
};

// Writes `data` to `path` so that a crash at any moment leaves either the
// old file (or none) or the whole new one: a temporary file beside it
// (NAME.tmp-PID), fsync, rename over `path`, fsync of the directory.
Status WriteFileAtomically(const std::string& path, std::string_view data);
// fsync of the directory holding `path`, so that a rename or a new file
// there survives a power cut.
Status SyncParentDirectory(const std::string& path);
// Creates `path` (0700) when missing; parents too.
Status MakeDirectories(const std::string& path);

}  // namespace ropeserve::storage

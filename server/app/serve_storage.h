// `serve`'s data directory: its settings (the flags --data-dir,
// --max-file-bytes, --batch-*), opening it (the Files API's and Batch
// API's stores), and the batch runner that works through the stored
// batches while the server is ready.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "server/api/serving_context.h"
#include "server/batch/batch_runner.h"
#include "server/batch/batch_store.h"
#include "server/batch/file_store.h"
#include "server/common/status.h"
#include "server/storage/data_dir.h"

namespace ropeserve::app {

struct StorageConfig {
  std::string data_dir;  // "" = storage::DataDir::Default(), best effort
  std::size_t max_file_bytes = std::size_t{100} << 20;
  std::size_t files_max_bytes = std::size_t{10} << 30;  // all files together (uploads and results)
  std::int64_t batch_max_active = 100;
  int batch_max_in_flight = 4;
  // gaps: batch lines run only in engine steps without interactive
  // requests (SchedulerConfig::background_priority); shared: beside them.
  std::string batch_scheduling = "gaps";
};

class Storage {
 public:
  // Opens the data directory. Named with --data-dir, it must open (an
  // error otherwise); the default is best effort, so that a second server
  // on the same machine, or a read-only home, still serves (without the
  // Files and Batch APIs, said in the log).
  static StatusOr<std::unique_ptr<Storage>> Open(const StorageConfig& flags);
  ~Storage();  // StopBatches()

  // Where the REST routes find the stores (null without a directory).
  void Attach(api::ServingContext& ctx);
  // Once the model serves: the runner starts on the stored batches
  // (unfinished ones resume). StopBatches cancels its running lines, which
  // stay pending for the next start.
  void StartBatches(api::ServingContext& ctx);
  void StopBatches();

 private:
  StorageConfig flags_;
  std::unique_ptr<storage::DataDir> dir_;
  std::unique_ptr<batch::FileStore> files_;
  std::unique_ptr<batch::BatchStore> batches_;
  std::unique_ptr<batch::BatchRunner> runner_;
  api::ServerMetrics* metrics_ = nullptr;  // where the batches' gauges are attached
};

}  // namespace ropeserve::app

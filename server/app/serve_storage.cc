#include "server/app/serve_storage.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

#include "server/api/rest/batch_executor.h"
#include "server/app/test_hooks.h"

namespace ropeserve::app {

StatusOr<std::unique_ptr<Storage>> Storage::Open(const StorageConfig& flags) {
  auto s = std::make_unique<Storage>();
  s->flags_ = flags;
  const std::string dir = flags.data_dir.empty() ? storage::DataDir::Default() : flags.data_dir;
  auto opened = storage::DataDir::Open(dir);
  if (!opened.ok()) {
    if (!flags.data_dir.empty()) return opened.status();
    spdlog::warn("no data directory, so no Files and Batch APIs: {} (pass --data-dir DIR)", opened.status().message());
    return std::make_unique<Storage>();  // a directory without its store is not kept locked
  }
  s->dir_ = std::move(*opened);
  batch::FileStoreOptions fo;
  fo.max_total_bytes = static_cast<std::int64_t>(flags.files_max_bytes);
  // A directory that opens but whose store does not (a damaged database,
  // files without their database) stops the start-up even when it is the
  // default one: serving without it would hide what it holds.
  RS_ASSIGN_OR_RETURN(s->files_, batch::FileStore::Open(*s->dir_, fo));
  for (const std::string& path : s->files_->quarantined())
    spdlog::warn(
        "moved {} to the quarantine: the database does not list it (an upload or a deletion cut short by a "
        "crash?); nothing was deleted",
        path);
  batch::BatchStoreOptions bo;
  bo.max_active = flags.batch_max_active;
  if (const char* crash = TestHook("ROPESERVE_INJECT_BATCH_CRASH"); crash != nullptr && *crash) {
    if (std::string(crash) != "finalizing") return InvalidArgument("ROPESERVE_INJECT_BATCH_CRASH must be finalizing");
    bo.before_finalize_commit = [] {
      spdlog::warn("ROPESERVE_INJECT_BATCH_CRASH: exiting while a batch is finalized, as a crash would");
      std::_Exit(137);
    };
  }
  s->batches_ = std::make_unique<batch::BatchStore>(*s->files_, bo);
  spdlog::info("data directory {}", dir);
  return s;
}

Storage::~Storage() { StopBatches(); }

void Storage::Attach(api::ServingContext& ctx) {
  ctx.files = files_.get();
  ctx.batches = batches_.get();
}

void Storage::StartBatches(api::ServingContext& ctx) {
  if (batches_ == nullptr || runner_ != nullptr) return;
  batch::BatchRunnerOptions ro;
  ro.max_in_flight = flags_.batch_max_in_flight;
  ro.check_body = &api::CheckBatchBody;
  runner_ = std::make_unique<batch::BatchRunner>(*batches_, api::BatchLineExecutor(ctx), ro);
  batches_->SetListener([r = runner_.get()] { r->Wake(); });
  ctx.batch_runner = runner_.get();
  if (ctx.metrics != nullptr) {
    metrics_ = ctx.metrics;
    metrics_->AttachBatches([store = batches_.get(), runner = runner_.get(), files = files_.get()] {
      api::BatchGauges g;
      for (const auto& r : store->Progress().rows)
        g.rows.push_back({r.status, r.batches, r.pending, r.completed, r.failed});
      g.running = runner->running();
      g.quarantined_files = static_cast<std::int64_t>(files->quarantined().size());
      return g;
    });
  }
  runner_->Start();
}

void Storage::StopBatches() {
  if (runner_ == nullptr) return;
  batches_->SetListener(nullptr);
  if (metrics_ != nullptr) metrics_->AttachBatches(nullptr);
  metrics_ = nullptr;
  runner_->Stop();
}

}  // namespace ropeserve::app

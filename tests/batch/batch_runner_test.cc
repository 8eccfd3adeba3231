// The Batch API's store and runner with a fake executor (no model): a
// batch runs every line once and writes OpenAI's output and error lines;
// cancelling, the completion window, bad input files, per-owner isolation,
// the active-batch cap; and the point of it all, that a runner stopped at
// any moment (as a crash would) and started again on the same directory
// finishes the batch with every line's result exactly once.
#include "server/batch/batch_runner.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "server/batch/batch_store.h"
#include "server/batch/file_store.h"
#include "server/storage/data_dir.h"
#include "tests/common/scratch_dir.h"

namespace ropeserve {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

std::string Input(int n, const std::string& url = "/v1/completions") {
  std::string out;
  for (int i = 0; i < n; ++i)
    out += json{{"custom_id", "r" + std::to_string(i)},
                {"method", "POST"},
                {"url", url},
                {"body", {{"prompt", "p" + std::to_string(i)}}}}
               .dump() +
           "\n";
  return out;
}

Status AnyBody(const std::string&, const std::string&) { return Status::Ok(); }

// One directory's stores, reopened as a restarted server would.
struct Stores {
  explicit Stores(const std::string& path, batch::BatchStoreOptions options = {},
                  batch::FileStoreOptions file_options = {}) {
    auto d = storage::DataDir::Open(path);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    dir = std::move(*d);
    auto f = batch::FileStore::Open(*dir, file_options);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    files = std::move(*f);
    batches = std::make_unique<batch::BatchStore>(*files, std::move(options));
  }
  std::unique_ptr<storage::DataDir> dir;
  std::unique_ptr<batch::FileStore> files;
  std::unique_ptr<batch::BatchStore> batches;

  batch::BatchInfo Submit(const std::string& owner, const std::string& content,
                          const std::string& endpoint = "/v1/completions") {
    auto f = files->Create(owner, "in.jsonl", "batch", content);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    auto b = batches->Create(owner, f->id, endpoint, R"({"k":"v"})", 0);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return *b;
  }
  batch::BatchInfo WaitFinished(const std::string& id, const std::string& owner) {
    for (int i = 0; i < 3000; ++i) {
      auto b = batches->Get(id, owner);
      if (b.ok() && b->finished()) return *b;
      std::this_thread::sleep_for(10ms);
    }
    ADD_FAILURE() << "batch " << id << " did not finish";
    return *batches->Get(id, owner);
  }
  // The file's lines, parsed.
  std::vector<json> Lines(const std::string& file_id, const std::string& owner) {
    std::vector<json> out;
    if (file_id.empty()) return out;
    auto content = files->Content(file_id, owner);
    EXPECT_TRUE(content.ok());
    std::size_t pos = 0;
    for (std::size_t end; (end = content->find('\n', pos)) != std::string::npos; pos = end + 1)
      out.push_back(json::parse(content->substr(pos, end - pos)));
    EXPECT_EQ(pos, content->size()) << "the file ends with a newline";
    return out;
  }
};

batch::BatchRunnerOptions Fast(int in_flight = 3) {
  batch::BatchRunnerOptions o;
  o.max_in_flight = in_flight;
  o.poll = 5ms;
  o.retry_after = 5ms;
  o.check_body = &AnyBody;
  return o;
}

// Echoes the body; prompts ending in "3" fail with a 400.
batch::LineOutcome Echo(const batch::LineRequest& r, const std::atomic<bool>&) {
  batch::LineOutcome o;
  const json body = json::parse(r.body);
  const std::string prompt = body["prompt"];
  if (prompt.back() == '3') {
    o.status_code = 400;
    o.body = json{{"error", {{"message", "bad prompt"}}}}.dump();
  } else {
    o.body = json{{"id", "cmpl-" + r.custom_id}, {"echo", prompt}}.dump();
    o.request_id = "cmpl-" + r.custom_id;
  }
  return o;
}

// Echoes the first `n` lines it is given; each later one blocks until it
// is cancelled, as a long generation would, and is not recorded.
batch::LineExecutor EchoThenBlock(std::atomic<int>& started, int n) {
  return [&started, n](const batch::LineRequest& r, const std::atomic<bool>& cancelled) {
    if (++started <= n) return Echo(r, cancelled);
    while (!cancelled) std::this_thread::sleep_for(1ms);
    batch::LineOutcome o;
    o.retry = true;
    return o;
  };
}

TEST(BatchRunner, RunsEveryLineOnceIntoOutputAndErrorFiles) {
  testing::ScratchDir t;
  Stores s(t.path());
  const batch::BatchInfo created = s.Submit("alice", Input(25));
  EXPECT_EQ(created.status, "validating");
  EXPECT_EQ(created.expires_at - created.created_at, 24 * 3600);
  std::atomic<int> calls{0};
  batch::BatchRunner runner(
      *s.batches,
      [&](const batch::LineRequest& r, const std::atomic<bool>& c) {
        ++calls;
        EXPECT_EQ(r.owner, "alice");
        EXPECT_EQ(r.endpoint, "/v1/completions");
        return Echo(r, c);
      },
      Fast());
  runner.Start();
  const batch::BatchInfo b = s.WaitFinished(created.id, "alice");
  runner.Stop();
  EXPECT_EQ(b.status, "completed");
  EXPECT_EQ(calls.load(), 25);
  EXPECT_EQ(b.total, 25);
  EXPECT_EQ(b.failed, 3);  // r3, r13, r23
  EXPECT_EQ(b.completed, 22);
  EXPECT_GT(b.in_progress_at, 0);
  EXPECT_GT(b.finalizing_at, 0);
  EXPECT_GT(b.completed_at, 0);
  EXPECT_EQ(b.metadata, R"({"k":"v"})");
  const auto out = s.Lines(b.output_file_id, "alice");
  const auto err = s.Lines(b.error_file_id, "alice");
  ASSERT_EQ(out.size(), 22u);
  ASSERT_EQ(err.size(), 3u);
  // In input order, OpenAI's shape.
  EXPECT_EQ(out[0]["custom_id"], "r0");
  EXPECT_EQ(out[0]["response"]["status_code"], 200);
  EXPECT_EQ(out[0]["response"]["request_id"], "cmpl-r0");
  EXPECT_EQ(out[0]["response"]["body"]["echo"], "p0");
  EXPECT_TRUE(out[0]["error"].is_null());
  EXPECT_EQ(out[0]["id"].get<std::string>().rfind("batch_req_", 0), 0u);
  EXPECT_EQ(err[1]["custom_id"], "r13");
  EXPECT_EQ(err[1]["response"]["status_code"], 400);
  EXPECT_EQ(err[1]["response"]["body"]["error"]["message"], "bad prompt");
  EXPECT_EQ(s.files->Get(b.output_file_id, "alice")->purpose, "batch_output");
  // Another key sees neither the batch nor its files.
  EXPECT_EQ(s.batches->Get(b.id, "bob").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(s.files->Get(b.output_file_id, "bob").status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(s.batches->List("bob", "", 10)->batches.empty());
  // A finished batch cannot be cancelled.
  EXPECT_EQ(s.batches->Cancel(b.id, "alice").status().code(), ErrorCode::kFailedPrecondition);
}

TEST(BatchRunner, OverloadedLinesRunAgainAndNeverMoreThanTheCapAtOnce) {
  testing::ScratchDir t;
  Stores s(t.path());
  const batch::BatchInfo created = s.Submit("", Input(12));
  std::atomic<int> running{0}, most{0};
  std::mutex mu;
  std::map<std::string, int> tries;
  batch::BatchRunner runner(
      *s.batches,
      [&](const batch::LineRequest& r, const std::atomic<bool>& c) {
        const int now = ++running;
        for (int m = most; now > m && !most.compare_exchange_weak(m, now);) {
        }
        std::this_thread::sleep_for(2ms);
        --running;
        int n;
        {
          std::lock_guard<std::mutex> lock(mu);
          n = ++tries[r.custom_id];
        }
        if (n == 1) {  // every line is refused once, as by a full queue
          batch::LineOutcome o;
          o.status_code = 429;
          o.retry = true;
          return o;
        }
        return Echo(r, c);
      },
      Fast(2));
  runner.Start();
  const batch::BatchInfo b = s.WaitFinished(created.id, "");
  runner.Stop();
  EXPECT_EQ(b.status, "completed");
  EXPECT_LE(most.load(), 2);
  EXPECT_EQ(tries.size(), 12u);
  for (const auto& [id, n] : tries) EXPECT_EQ(n, 2) << id;
  EXPECT_EQ(b.completed + b.failed, 12);
}

// Stopping the runner mid-batch (what a crash does to the lines running)
// and starting another on the reopened directory: each line is recorded
// exactly once, and lines recorded before the stop never run again.
TEST(BatchRunner, ResumesAfterAStopWithEveryResultExactlyOnce) {
  testing::ScratchDir t;
  std::string id;
  std::mutex mu;
  std::map<std::string, int> runs;
  auto counting = [&](const batch::LineRequest& r, const std::atomic<bool>& c) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ++runs[r.custom_id];
    }
    std::this_thread::sleep_for(1ms);
    return Echo(r, c);
  };
  for (int round = 0; round < 4; ++round) {
    Stores s(t.path());
    if (round == 0) id = s.Submit("alice", Input(60)).id;
    // Lines done so far must not run again.
    auto before = s.batches->Get(id, "alice");
    ASSERT_TRUE(before.ok());
    const std::int64_t done_before = before->completed + before->failed;
    batch::BatchRunner runner(*s.batches, counting, Fast(3));
    runner.Start();
    if (round < 3) {
      for (int i = 0; i < 500; ++i) {
        auto b = s.batches->Get(id, "alice");
        if (b->completed + b->failed >= done_before + 8 || b->finished()) break;
        std::this_thread::sleep_for(2ms);
      }
      runner.Stop();
      auto b = s.batches->Get(id, "alice");
      EXPECT_FALSE(b->finished()) << "round " << round << ": the test wants a stop mid-batch";
      continue;
    }
    const batch::BatchInfo b = s.WaitFinished(id, "alice");
    runner.Stop();
    EXPECT_EQ(b.status, "completed");
    EXPECT_EQ(b.completed + b.failed, 60);
    std::map<std::string, int> seen;
    for (const auto& l : s.Lines(b.output_file_id, "alice")) ++seen[l["custom_id"]];
    for (const auto& l : s.Lines(b.error_file_id, "alice")) ++seen[l["custom_id"]];
    ASSERT_EQ(seen.size(), 60u);
    for (const auto& [cid, n] : seen) EXPECT_EQ(n, 1) << cid;
  }
  // A line runs more than once only when a stop cancelled it before its
  // result was recorded: at most once per stop per running line.
  int extra = 0;
  for (const auto& [cid, n] : runs) extra += n - 1;
  EXPECT_LE(extra, 3 * 3);
}

TEST(BatchRunner, CancellingStopsTheLinesAndReportsTheRest) {
  testing::ScratchDir t;
  Stores s(t.path());
  const batch::BatchInfo created = s.Submit("alice", Input(30));
  std::atomic<int> started{0};
  batch::BatchRunner runner(*s.batches, EchoThenBlock(started, 4), Fast(2));
  runner.Start();
  while (started < 6) std::this_thread::sleep_for(1ms);
  auto cancelling = s.batches->Cancel(created.id, "alice");
  ASSERT_TRUE(cancelling.ok());
  EXPECT_TRUE(cancelling->status == "cancelling") << cancelling->status;
  const batch::BatchInfo b = s.WaitFinished(created.id, "alice");
  runner.Stop();
  EXPECT_EQ(b.status, "cancelled");
  EXPECT_GT(b.cancelling_at, 0);
  EXPECT_GT(b.cancelled_at, 0);
  EXPECT_EQ(b.completed + b.failed, 4);
  const auto err = s.Lines(b.error_file_id, "alice");
  std::size_t not_run = 0;
  for (const auto& l : err)
    if (l["response"].is_null()) {
      EXPECT_EQ(l["error"]["code"], "batch_cancelled");
      ++not_run;
    }
  EXPECT_EQ(not_run, 26u);
  EXPECT_EQ(s.Lines(b.output_file_id, "alice").size() + err.size(), 30u);
}

TEST(BatchRunner, PastTheCompletionWindowTheBatchExpires) {
  testing::ScratchDir t;
  std::atomic<std::int64_t> now{1'800'000'000};
  batch::BatchStoreOptions options;
  options.clock = [&] { return now.load(); };
  Stores s(t.path(), options);
  const batch::BatchInfo created = s.Submit("alice", Input(10));
  std::atomic<int> started{0};
  batch::BatchRunner runner(*s.batches, EchoThenBlock(started, 2), Fast(1));
  runner.Start();
  while (started < 3) std::this_thread::sleep_for(1ms);
  now += 24 * 3600;
  const batch::BatchInfo b = s.WaitFinished(created.id, "alice");
  runner.Stop();
  EXPECT_EQ(b.status, "expired");
  EXPECT_EQ(b.expired_at, now.load());
  EXPECT_EQ(s.Lines(b.output_file_id, "alice").size(), 2u);
  const auto err = s.Lines(b.error_file_id, "alice");
  ASSERT_EQ(err.size(), 8u);
  EXPECT_EQ(err[0]["error"]["code"], "batch_expired");
}

TEST(BatchRunner, AnInputFileWhoseLinesCallAnotherEndpointFailsTheBatch) {
  testing::ScratchDir t;
  Stores s(t.path());
  std::string content = Input(3);
  std::string other = Input(1, "/v1/chat/completions");
  other.replace(other.find("\"r0\""), 4, "\"x0\"");
  content += other;
  const batch::BatchInfo created = s.Submit("alice", content);
  batch::BatchRunner runner(*s.batches, &Echo, Fast());
  runner.Start();
  const batch::BatchInfo b = s.WaitFinished(created.id, "alice");
  runner.Stop();
  EXPECT_EQ(b.status, "failed");
  EXPECT_GT(b.failed_at, 0);
  const json errors = json::parse(b.errors);
  EXPECT_EQ(errors["object"], "list");
  ASSERT_EQ(errors["data"].size(), 1u);
  EXPECT_EQ(errors["data"][0]["line"], 4);
  EXPECT_EQ(errors["data"][0]["param"], "url");
  EXPECT_TRUE(b.output_file_id.empty());
}

TEST(BatchStore, CapsActiveBatchesAndPagesNewestFirst) {
  testing::ScratchDir t;
  batch::BatchStoreOptions options;
  options.max_active = 3;
  Stores s(t.path(), options);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(s.Submit("alice", Input(1)).id);
  auto f = s.files->Create("alice", "in.jsonl", "batch", Input(1));
  EXPECT_EQ(s.batches->Create("alice", f->id, "/v1/completions", "", 0).status().code(), ErrorCode::kResourceExhausted);
  // A file of another owner, or not of purpose batch, is no input.
  EXPECT_EQ(s.batches->Create("bob", f->id, "/v1/completions", "", 0).status().param(), "input_file_id");
  auto page = s.batches->List("alice", "", 2);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->batches.size(), 2u);
  EXPECT_TRUE(page->has_more);
  EXPECT_EQ(page->batches[0].id, ids[2]);
  auto rest = s.batches->List("alice", page->batches[1].id, 2);
  ASSERT_EQ(rest->batches.size(), 1u);
  EXPECT_FALSE(rest->has_more);
  EXPECT_EQ(rest->batches[0].id, ids[0]);
  EXPECT_EQ(s.batches->List("alice", "batch_nope", 2).status().param(), "after");
  // Cancelled before it ran: no lines, no files.
  auto c = s.batches->Cancel(ids[0], "alice");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->status, "cancelling");
  batch::BatchRunner runner(*s.batches, &Echo, Fast());
  runner.Start();
  const batch::BatchInfo b = s.WaitFinished(ids[0], "alice");
  runner.Stop();
  EXPECT_EQ(b.status, "cancelled");
  EXPECT_TRUE(b.output_file_id.empty());
  EXPECT_TRUE(b.error_file_id.empty());
}

// Results that do not fit the file store (its quota here; a full disk
// alike) fail the batch with a clear error; the store goes on.
TEST(BatchRunner, ResultsThatDoNotFitFailTheBatchClearly) {
  testing::ScratchDir t;
  const std::string input = Input(5);
  batch::FileStoreOptions tight;
  tight.max_total_bytes = static_cast<std::int64_t>(input.size()) + 100;
  Stores s(t.path(), {}, tight);
  const batch::BatchInfo created = s.Submit("alice", input);
  batch::BatchRunner runner(*s.batches, &Echo, Fast());
  runner.Start();
  const batch::BatchInfo b = s.WaitFinished(created.id, "alice");
  runner.Stop();
  EXPECT_EQ(b.status, "failed");
  const json errors = json::parse(b.errors);
  EXPECT_EQ(errors["data"][0]["code"], "storage_full");
  EXPECT_NE(errors["data"][0]["message"].get<std::string>().find("storage is full"), std::string::npos);
  EXPECT_TRUE(b.output_file_id.empty());
  // Nothing half-written is left: the input file alone.
  EXPECT_EQ(s.files->List("alice", "", "", 10, false)->files.size(), 1u);
  EXPECT_EQ(s.files->total_bytes(), static_cast<std::int64_t>(input.size()));
}

}  // namespace
}  // namespace ropeserve

// The stored responses of OpenAI's Responses API (store: true, the
// default): what GET / DELETE /v1/responses/{id}, previous_response_id
// (conversation state) and background responses read and write.
//
// In memory, bounded: at most `max_responses` responses and `max_bytes` of
// their JSON, the least recently used dropped first; a response older than
// `ttl` is gone. Stored responses are lost when the server restarts (the
// data directory, --data-dir, keeps files and batches, not responses).
// Each response belongs to the API key that made it (its SHA-256 digest, ""
// when keys are off): another key is told it does not exist, exactly as for
// an unknown id.
//
// Background responses (background: true) run on their own thread each, at
// most `max_background` at once; Cancel() asks one to stop, and the store's
// destruction (or Shutdown) cancels and joins them all.
//
// Torch-free and model-free; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/common/status.h"

namespace ropeserve::api {

struct ResponseStoreOptions {
  std::size_t max_responses = 10000;
  std::size_t max_bytes = std::size_t{256} << 20;
  std::chrono::seconds ttl{24 * 3600};
  std::size_t max_background = 64;
};

struct StoredResponse {
  std::string owner;     // the API key's digest ("" when keys are off)
  std::string response;  // the response object, JSON text, as last known
  // The conversation up to and including this response's output, as chat
  // messages (what previous_response_id continues).
  nlohmann::ordered_json conversation = nlohmann::ordered_json::array();
  std::string status;  // the response's status (queued, in_progress, completed, ...)
  bool background = false;
  // The items that made this response, oldest first, as GET
  // /v1/responses/{id}/input_items lists them: those of the response it
  // continues (its input items, then its output), then its own input.
  nlohmann::ordered_json items = nlohmann::ordered_json::array();
};

class ResponseStore {
 public:
  explicit ResponseStore(ResponseStoreOptions options = {});
  ~ResponseStore();
  ResponseStore(const ResponseStore&) = delete;
  ResponseStore& operator=(const ResponseStore&) = delete;

  // `prefix` + 48 random hex digits (OpenSSL's RAND_bytes): ids that
  // cannot be guessed.
  static std::string NewId(const char* prefix);

  // Inserts or replaces; drops expired and least recently used responses
  // beyond the caps (never one whose background run is going on). A
  // response larger than max_bytes alone is not stored (false).
  bool Put(const std::string& id, StoredResponse r);
  // The response when it exists, has not expired and belongs to `owner`.
  std::optional<StoredResponse> Get(const std::string& id, const std::string& owner);
  // False when there is no such response for `owner`. A running
  // background response is cancelled first.
  bool Delete(const std::string& id, const std::string& owner);

  // Runs `work` on a thread of its own for response `id` (already Put).
  // `cancelled` turns true when Cancel, Delete or Shutdown asks it to stop;
  // `work` must then end soon (it records the final state with Put).
  // ResourceExhausted when max_background runs are going on.
  using Work = std::function<void(const std::atomic<bool>& cancelled)>;
  Status RunInBackground(const std::string& id, Work work);
  // Asks the background run of `id` to stop and waits (up to `wait`) for
  // it to end. NotFound for no such response of `owner`; InvalidArgument
  // for a response that was not created in the background. A finished
  // response is left as it is.
  Status Cancel(const std::string& id, const std::string& owner,
                std::chrono::milliseconds wait = std::chrono::milliseconds(5000));
  // Cancels every background run and waits for them.
  void Shutdown();

  struct Stats {
    std::size_t responses = 0;
    std::size_t bytes = 0;
    std::size_t running = 0;
  };
  Stats stats();

 private:
  struct Entry {
    StoredResponse value;
    std::size_t bytes = 0;
    std::chrono::steady_clock::time_point created;
    std::list<std::string>::iterator lru;  // position in lru_ (front: most recent)
  };
  struct Run {
    std::shared_ptr<std::atomic<bool>> cancelled;
    std::shared_ptr<std::atomic<bool>> done;
    std::thread thread;
  };
  // The entry of `id` when it belongs to `owner` and has not expired (an
  // expired one is erased), else entries_.end().
  std::map<std::string, Entry>::iterator FindLocked(const std::string& id, const std::string& owner);
  void EraseLocked(std::map<std::string, Entry>::iterator it);
  void EvictLocked();
  bool ExpiredLocked(const Entry& e) const;
  void ReapLocked(std::vector<std::thread>& finished);

  ResponseStoreOptions options_;
  std::mutex mu_;
  std::condition_variable run_ended_;
  std::map<std::string, Entry> entries_;
  std::list<std::string> lru_;
  std::size_t bytes_ = 0;
  std::map<std::string, Run> runs_;  // background runs by response id
  bool shut_down_ = false;
};

}  // namespace ropeserve::api

#include "server/api/rest/response_store.h"

#include <utility>

#include "server/common/random_id.h"

namespace ropeserve::api {

ResponseStore::ResponseStore(ResponseStoreOptions options) : options_(options) {}

ResponseStore::~ResponseStore() { Shutdown(); }

std::string ResponseStore::NewId(const char* prefix) { return RandomId(prefix, 24); }

bool ResponseStore::ExpiredLocked(const Entry& e) const {
  return std::chrono::steady_clock::now() - e.created > options_.ttl;
}

void ResponseStore::EraseLocked(std::map<std::string, Entry>::iterator it) {
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

void ResponseStore::EvictLocked() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (ExpiredLocked(it->second) && runs_.count(it->first) == 0) EraseLocked(it);
    it = next;
  }
  // Least recently used first, skipping responses still being produced.
  auto victim = lru_.end();
  while ((entries_.size() > options_.max_responses || bytes_ > options_.max_bytes) && victim != lru_.begin()) {
    --victim;
    if (runs_.count(*victim) != 0) continue;
    auto it = entries_.find(*victim);
    victim = std::next(victim);  // stays valid: the erased element is before it
    EraseLocked(it);
  }
}

bool ResponseStore::Put(const std::string& id, StoredResponse r) {
  const std::size_t bytes =
      id.size() + r.owner.size() + r.response.size() + r.conversation.dump().size() + r.items.dump().size() + 64;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (bytes > options_.max_bytes) {
    if (it != entries_.end()) EraseLocked(it);
    return false;
  }
  if (it == entries_.end()) {
    lru_.push_front(id);
    Entry e;
    e.created = std::chrono::steady_clock::now();
    e.lru = lru_.begin();
    it = entries_.emplace(id, std::move(e)).first;
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    bytes_ -= it->second.bytes;
  }
  it->second.value = std::move(r);
  it->second.bytes = bytes;
  bytes_ += bytes;
  EvictLocked();
  return true;
}

std::map<std::string, ResponseStore::Entry>::iterator ResponseStore::FindLocked(const std::string& id,
                                                                                const std::string& owner) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.value.owner != owner) return entries_.end();
  if (ExpiredLocked(it->second) && runs_.count(id) == 0) {
    EraseLocked(it);
    return entries_.end();
  }
  return it;
}

std::optional<StoredResponse> ResponseStore::Get(const std::string& id, const std::string& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = FindLocked(id, owner);
  if (it == entries_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.value;
}

bool ResponseStore::Delete(const std::string& id, const std::string& owner) {
  // A running background response stops first; NotFound: nothing to delete.
  if (Cancel(id, owner).code() == ErrorCode::kNotFound) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = FindLocked(id, owner);
  if (it == entries_.end()) return false;
  EraseLocked(it);
  return true;
}

void ResponseStore::ReapLocked(std::vector<std::thread>& finished) {
  for (auto it = runs_.begin(); it != runs_.end();) {
    if (it->second.done->load()) {
      finished.push_back(std::move(it->second.thread));
      it = runs_.erase(it);
    } else {
      ++it;
    }
  }
}

Status ResponseStore::RunInBackground(const std::string& id, Work work) {
  std::vector<std::thread> finished;
  Status result = Status::Ok();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ReapLocked(finished);
    if (shut_down_) {
      result = Unavailable("the server is shutting down");
    } else if (runs_.size() >= options_.max_background) {
      result = Status(ErrorCode::kResourceExhausted, "too many background responses are running (at most " +
                                                         std::to_string(options_.max_background) + ")");
    } else {
      Run& run = runs_[id];
      run.cancelled = std::make_shared<std::atomic<bool>>(false);
      run.done = std::make_shared<std::atomic<bool>>(false);
      run.thread = std::thread([this, work = std::move(work), cancelled = run.cancelled, done = run.done] {
        work(*cancelled);
        std::lock_guard<std::mutex> lock(mu_);
        done->store(true);
        run_ended_.notify_all();
      });
    }
  }
  for (auto& t : finished) t.join();
  return result;
}

Status ResponseStore::Cancel(const std::string& id, const std::string& owner, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = FindLocked(id, owner);
  if (it == entries_.end()) return NotFound("no response with id '" + id.substr(0, 100) + "'");
  if (!it->second.value.background)
    return InvalidArgument("only responses created with background: true can be cancelled");
  auto run = runs_.find(id);
  if (run == runs_.end()) return Status::Ok();
  run->second.cancelled->store(true);
  std::shared_ptr<std::atomic<bool>> done = run->second.done;
  run_ended_.wait_for(lock, wait, [&] { return done->load(); });
  return Status::Ok();
}

void ResponseStore::Shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;
    for (auto& [id, run] : runs_) {
      run.cancelled->store(true);
      threads.push_back(std::move(run.thread));
    }
    runs_.clear();
  }
  for (auto& t : threads)
    if (t.joinable()) t.join();
}

ResponseStore::Stats ResponseStore::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t running = 0;
  for (const auto& [id, run] : runs_) running += run.done->load() ? 0 : 1;
  return {entries_.size(), bytes_, running};
}

}  // namespace ropeserve::api

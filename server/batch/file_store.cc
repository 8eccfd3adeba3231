#include "server/batch/file_store.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include "server/batch/schema.h"
#include "server/common/json_file.h"
#include "server/common/random_id.h"
#include "server/common/unix_time.h"

namespace ropeserve::batch {

namespace {

constexpr const char* kColumns = "id, filename, purpose, bytes, created_at, expires_at, seq";

FileInfo Row(const storage::Statement& st) {
  return {st.Text(0), st.Text(1), st.Text(2), st.Int(3), st.Int(4), st.Int(5)};
}

Status NoSuchFile(const std::string& id) { return NotFound("no file with id '" + id.substr(0, 100) + "'"); }

// The first column of every row `st` gives.
StatusOr<std::vector<std::string>> Column(storage::Statement& st) {
  std::vector<std::string> out;
  for (;;) {
    RS_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return out;
    out.push_back(st.Text(0));
  }
}

}  // namespace

StatusOr<std::unique_ptr<FileStore>> FileStore::Open(const storage::DataDir& dir, FileStoreOptions options) {
  const std::string files_dir = dir.Path("files"), db_path = dir.Path("batch.db");
  RS_RETURN_IF_ERROR(storage::MakeDirectories(files_dir));
  std::error_code ec;
  if (!std::filesystem::exists(db_path, ec)) {
    // A new database would list none of them, and the sweep below would
    // take every one for an orphan.
    std::int64_t held = 0;
    for (auto it = std::filesystem::directory_iterator(files_dir, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
      ++held;
    if (held > 0)
      return FailedPrecondition("database " + db_path + " is missing but " + files_dir + " holds " +
                                std::to_string(held) +
                                " files it listed: restore the database from a backup, or move files/ away to start "
                                "empty");
  }
  RS_ASSIGN_OR_RETURN(auto db, storage::Database::Open(db_path, BatchSchema()));
  std::unique_ptr<FileStore> store(new FileStore(std::move(db), files_dir, dir.Path("quarantine"), options));
  std::lock_guard<std::mutex> lock(store->mu_);
  RS_RETURN_IF_ERROR(store->RemoveExpiredLocked());
  RS_RETURN_IF_ERROR(store->QuarantineOrphansLocked());
  return store;
}

// Content files without a row: a crash between writing and committing (an
// upload cut short), or between deleting a row and its file; temporary
// files of a write cut by a crash; anything else put there. Moved, never
// deleted: the database cannot say what they are, so neither can we.
Status FileStore::QuarantineOrphansLocked() {
  RS_ASSIGN_OR_RETURN(storage::Statement st, db_->Prepare("SELECT id FROM files"));
  RS_ASSIGN_OR_RETURN(std::vector<std::string> ids, Column(st));
  const std::set<std::string> known(ids.begin(), ids.end());
  std::vector<std::filesystem::path> orphans;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(files_dir_, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    if (known.count(it->path().filename().string()) == 0) orphans.push_back(it->path());
  if (ec) return FailedPrecondition("cannot list " + files_dir_ + ": " + ec.message());
  if (orphans.empty()) return Status::Ok();
  RS_RETURN_IF_ERROR(storage::MakeDirectories(quarantine_dir_));
  for (const auto& from : orphans) {
    std::string to = quarantine_dir_ + "/" + from.filename().string();
    for (int n = 1; std::filesystem::exists(to, ec); ++n)
      to = quarantine_dir_ + "/" + from.filename().string() + "." + std::to_string(n);
    if (::rename(from.c_str(), to.c_str()) != 0)
      return FailedPrecondition("cannot move " + from.string() + ", which " + db_->path() + " does not list, to " + to +
                                ": " + std::strerror(errno));
    quarantined_.push_back(to);
  }
  RS_RETURN_IF_ERROR(storage::SyncParentDirectory(quarantined_.back()));
  return storage::SyncParentDirectory(orphans.back().string());
}

std::int64_t FileStore::Now() const {
  if (options_.clock) return options_.clock();
  return UnixSeconds();
}

// The rows first, then the contents (a crash between: orphans,
// quarantined at the next Open).
Status FileStore::RemoveExpiredLocked() {
  const std::int64_t now = Now();
  RS_ASSIGN_OR_RETURN(storage::Statement st,
                      db_->Prepare("SELECT id FROM files WHERE expires_at > 0 AND expires_at <= ?"));
  RS_ASSIGN_OR_RETURN(std::vector<std::string> expired, Column(st.Bind(1, now)));
  if (expired.empty()) return Status::Ok();
  RS_ASSIGN_OR_RETURN(storage::Statement del,
                      db_->Prepare("DELETE FROM files WHERE expires_at > 0 AND expires_at <= ?"));
  RS_RETURN_IF_ERROR(del.Bind(1, now).Run());
  for (const auto& id : expired) ::unlink(ContentPath(id).c_str());
  return Status::Ok();
}

StatusOr<std::int64_t> FileStore::UsedBytesLocked() {
  RS_ASSIGN_OR_RETURN(storage::Statement st, db_->Prepare("SELECT coalesce(sum(bytes), 0) FROM files"));
  RS_ASSIGN_OR_RETURN(bool row, st.Step());
  return row ? st.Int(0) : 0;
}

std::int64_t FileStore::total_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  auto used = UsedBytesLocked();
  return used.ok() ? *used : 0;
}

StatusOr<FileInfo> FileStore::Create(const std::string& owner, const std::string& filename, const std::string& purpose,
                                     std::string_view content, std::int64_t expires_after) {
  RS_ASSIGN_OR_RETURN(std::vector<FileInfo> made,
                      CreateAll(owner, {NewFile{filename, purpose, std::string(content), expires_after}}));
  return made.front();
}

StatusOr<std::vector<FileInfo>> FileStore::CreateAll(const std::string& owner, const std::vector<NewFile>& files,
                                                     const AlsoInTransaction& also) {
  std::lock_guard<std::mutex> lock(mu_);
  RS_RETURN_IF_ERROR(RemoveExpiredLocked());
  RS_ASSIGN_OR_RETURN(std::int64_t used, UsedBytesLocked());
  std::int64_t adding = 0;
  for (const NewFile& n : files) adding += static_cast<std::int64_t>(n.content.size());
  if (used + adding > options_.max_total_bytes)
    return Status(ErrorCode::kResourceExhausted, "the server's file storage is full (" + std::to_string(used) + " of " +
                                                     std::to_string(options_.max_total_bytes) +
                                                     " bytes used): delete files first");
  std::vector<FileInfo> made;
  auto unlink_all = [&] {
    for (const FileInfo& f : made) ::unlink(ContentPath(f.id).c_str());
  };
  // The contents first: a row never names a file that is not whole.
  for (const NewFile& n : files) {
    FileInfo f;
    f.id = RandomId("file-", 12);
    f.filename = n.filename;
    f.purpose = n.purpose;
    f.bytes = static_cast<std::int64_t>(n.content.size());
    f.created_at = Now();
    f.expires_at = n.expires_after > 0 ? f.created_at + n.expires_after : 0;
    if (Status s = storage::WriteFileAtomically(ContentPath(f.id), n.content); !s.ok()) {
      unlink_all();
      return s;
    }
    made.push_back(std::move(f));
  }
  Status s = db_->Transaction([&]() -> Status {
    for (const FileInfo& f : made) {
      RS_ASSIGN_OR_RETURN(storage::Statement st,
                          db_->Prepare("INSERT INTO files (id, owner, filename, purpose, bytes, created_at, expires_at)"
                                       " VALUES (?, ?, ?, ?, ?, ?, ?)"));
      RS_RETURN_IF_ERROR(st.Bind(1, f.id)
                             .Bind(2, owner)
                             .Bind(3, f.filename)
                             .Bind(4, f.purpose)
                             .Bind(5, f.bytes)
                             .Bind(6, f.created_at)
                             .Bind(7, f.expires_at)
                             .Run());
    }
    return also ? also(*db_, made) : Status::Ok();
  });
  if (!s.ok()) {
    unlink_all();
    return s;
  }
  return made;
}

Status FileStore::WithDatabase(const std::function<Status(storage::Database&)>& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  return fn(*db_);
}

StatusOr<std::optional<FileInfo>> FileStore::FindLocked(const std::string& id, const std::string& owner) {
  RS_ASSIGN_OR_RETURN(storage::Statement st,
                      db_->Prepare((std::string("SELECT ") + kColumns + " FROM files WHERE id = ? AND owner = ?" +
                                    " AND (expires_at = 0 OR expires_at > ?)")
                                       .c_str()));
  st.Bind(1, id).Bind(2, owner).Bind(3, Now());
  RS_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return std::optional<FileInfo>();
  return std::optional<FileInfo>(Row(st));
}

StatusOr<FileInfo> FileStore::Get(const std::string& id, const std::string& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  RS_ASSIGN_OR_RETURN(std::optional<FileInfo> f, FindLocked(id, owner));
  if (!f) return NoSuchFile(id);
  return *f;
}

StatusOr<std::string> FileStore::Content(const std::string& id, const std::string& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  RS_ASSIGN_OR_RETURN(std::optional<FileInfo> f, FindLocked(id, owner));
  if (!f) return NoSuchFile(id);
  auto content = ReadTextFile(ContentPath(id));
  if (!content.ok()) return Internal("the content of file '" + id + "' is missing from the data directory");
  return content;
}

Status FileStore::Delete(const std::string& id, const std::string& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  RS_ASSIGN_OR_RETURN(std::optional<FileInfo> f, FindLocked(id, owner));
  if (!f) return NoSuchFile(id);
  RS_RETURN_IF_ERROR(db_->Transaction([&]() -> Status {
    RS_ASSIGN_OR_RETURN(storage::Statement st, db_->Prepare("DELETE FROM files WHERE id = ?"));
    return st.Bind(1, id).Run();
  }));
  ::unlink(ContentPath(id).c_str());  // a crash before this: the next Open quarantines it
  return Status::Ok();
}

StatusOr<FileStore::Page> FileStore::List(const std::string& owner, const std::string& purpose,
                                          const std::string& after, std::size_t limit, bool ascending) {
  std::lock_guard<std::mutex> lock(mu_);
  RS_RETURN_IF_ERROR(RemoveExpiredLocked());
  std::int64_t cursor = ascending ? 0 : std::numeric_limits<std::int64_t>::max();
  if (!after.empty()) {
    RS_ASSIGN_OR_RETURN(storage::Statement st, db_->Prepare("SELECT seq FROM files WHERE id = ? AND owner = ?"));
    st.Bind(1, after).Bind(2, owner);
    RS_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return Status(InvalidArgument("no file '" + after.substr(0, 100) + "' to list after")).WithParam("after");
    cursor = st.Int(0);
  }
  const std::string sql = std::string("SELECT ") + kColumns +
                          " FROM files WHERE owner = ? AND (? = '' OR purpose = ?)" +
                          (ascending ? " AND seq > ? ORDER BY seq ASC" : " AND seq < ? ORDER BY seq DESC") + " LIMIT ?";
  RS_ASSIGN_OR_RETURN(storage::Statement st, db_->Prepare(sql.c_str()));
  st.Bind(1, owner).Bind(2, purpose).Bind(3, purpose).Bind(4, cursor).Bind(5, static_cast<std::int64_t>(limit) + 1);
  Page page;
  for (;;) {
    RS_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    if (page.files.size() == limit) {
      page.has_more = true;
      break;
    }
    page.files.push_back(Row(st));
  }
  return page;
}

}  // namespace ropeserve::batch

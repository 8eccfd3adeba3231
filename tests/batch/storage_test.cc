// The data directory, SQLite databases and the Files API's store: what
// must survive a restart, and what must refuse to start rather than lose
// or mix up data (a second server on one directory, a foreign, newer or
// damaged database, files without their database); files the database
// does not list are quarantined, never deleted.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include "server/batch/file_store.h"
#include "server/common/json_file.h"
#include "server/storage/data_dir.h"
#include "server/storage/database.h"
#include "tests/checkpoint/test_checkpoints.h"
#include "tests/common/test_seed.h"

namespace ropeserve {
namespace {

namespace fs = std::filesystem;

using TempDir = testing::ScratchDir;

void WriteRaw(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

TEST(DataDir, IsCreatedPrivateAndHeldByOneProcess) {
  TempDir t;
  const std::string dir = t.path() + "/a/b";
  auto first = storage::DataDir::Open(dir);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // flock is per open file description: a second Open in this process
  // conflicts exactly as another process would.
  auto second = storage::DataDir::Open(dir);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("in use by another ropeserve process"), std::string::npos);
  EXPECT_NE(second.status().message().find(dir), std::string::npos);
  first->reset();
  EXPECT_TRUE(storage::DataDir::Open(dir).ok()) << "the lock outlived its holder";
  WriteRaw(t.path() + "/plain", "x");
  EXPECT_FALSE(storage::DataDir::Open(t.path() + "/plain").ok());
}

TEST(DataDir, WritesFilesWholeOrNotAtAll) {
  TempDir t;
  const std::string path = t.path() + "/f";
  ASSERT_TRUE(storage::WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(storage::WriteFileAtomically(path, std::string(100000, 'x')).ok());
  auto read = ReadTextFile(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, std::string(100000, 'x'));
  // No temporary file is left beside it.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(t.path())) entries += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(entries, 1);
  EXPECT_FALSE(storage::WriteFileAtomically(t.path() + "/missing/f", "x").ok());
  EXPECT_EQ(ReadTextFile(t.path() + "/none").status().code(), ErrorCode::kNotFound);
}

constexpr const char* kV1[] = {"CREATE TABLE a (x INTEGER);"};
constexpr const char* kV2[] = {"CREATE TABLE a (x INTEGER);", "ALTER TABLE a ADD COLUMN y TEXT;"};

TEST(Database, MigratesForwardAndRefusesWhatItDoesNotKnow) {
  TempDir t;
  const std::string path = t.path() + "/d.db";
  {
    auto db = storage::Database::Open(path, kV1);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    EXPECT_EQ((*db)->version(), 1);
    ASSERT_TRUE((*db)->Exec("INSERT INTO a (x) VALUES (7)").ok());
  }
  {
    auto db = storage::Database::Open(path, kV2);  // an upgrade keeps the rows
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    EXPECT_EQ((*db)->version(), 2);
    auto st = (*db)->Prepare("SELECT x, y FROM a");
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE(*st->Step());
    EXPECT_EQ(st->Int(0), 7);
    EXPECT_TRUE(st->IsNull(1));
  }
  // A downgrade would misread the newer schema.
  auto old = storage::Database::Open(path, kV1);
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.status().message().find("schema version 2"), std::string::npos) << old.status().message();

  // Another program's database is never adopted.
  const std::string foreign = t.path() + "/foreign.db";
  {
    auto db = storage::Database::Open(foreign, {});  // no migrations: nothing marks it
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)->Exec("CREATE TABLE theirs (x)").ok());
  }
  auto adopted = storage::Database::Open(foreign, kV1);
  ASSERT_FALSE(adopted.ok());
  EXPECT_NE(adopted.status().message().find("belongs to another program"), std::string::npos);
  EXPECT_NE(adopted.status().message().find(foreign), std::string::npos);

  // A file that is not a database, or a damaged one.
  const std::string junk = t.path() + "/junk.db";
  WriteRaw(junk, std::string(4096, 'j'));
  auto bad = storage::Database::Open(junk, kV1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(junk), std::string::npos);
}

TEST(Database, TransactionsRollBackWhenTheirBodyFails) {
  TempDir t;
  auto db = storage::Database::Open(t.path() + "/d.db", kV1);
  ASSERT_TRUE(db.ok());
  Status s = (*db)->Transaction([&]() -> Status {
    RS_RETURN_IF_ERROR((*db)->Exec("INSERT INTO a (x) VALUES (1)"));
    return Internal("stop");
  });
  EXPECT_FALSE(s.ok());
  auto st = (*db)->Prepare("SELECT count(*) FROM a");
  ASSERT_TRUE(st.ok() && *st->Step());
  EXPECT_EQ(st->Int(0), 0);
}

TEST(FileStore, KeepsFilesAcrossRestartsPerOwner) {
  TempDir t;
  std::string id;
  {
    auto dir = storage::DataDir::Open(t.path());
    ASSERT_TRUE(dir.ok());
    auto store = batch::FileStore::Open(**dir);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto f = (*store)->Create("alice", "in.jsonl", "batch", "line\n");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    id = f->id;
    EXPECT_EQ(id.rfind("file-", 0), 0u);
    EXPECT_EQ(f->bytes, 5);
    EXPECT_EQ(f->expires_at, 0);
  }
  auto dir = storage::DataDir::Open(t.path());
  ASSERT_TRUE(dir.ok());
  auto store = batch::FileStore::Open(**dir);
  ASSERT_TRUE(store.ok());
  auto got = (*store)->Get(id, "alice");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->filename, "in.jsonl");
  EXPECT_EQ(*(*store)->Content(id, "alice"), "line\n");
  // Another owner: it does not exist.
  EXPECT_EQ((*store)->Get(id, "bob").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ((*store)->Content(id, "bob").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ((*store)->Delete(id, "bob").code(), ErrorCode::kNotFound);
  ASSERT_TRUE((*store)->Delete(id, "alice").ok());
  EXPECT_EQ((*store)->Get(id, "alice").status().code(), ErrorCode::kNotFound);
  EXPECT_FALSE(fs::exists(t.path() + "/files/" + id));
}

TEST(FileStore, ListsInUploadOrderWithCursors) {
  TempDir t;
  auto dir = storage::DataDir::Open(t.path());
  ASSERT_TRUE(dir.ok());
  auto store = batch::FileStore::Open(**dir);
  ASSERT_TRUE(store.ok());
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back((*store)->Create("o", "f" + std::to_string(i), "batch", "x")->id);
  ASSERT_TRUE((*store)->Create("other", "g", "batch", "x").ok());
  auto all = (*store)->List("o", "", "", 100, true);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->files.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(all->files[i].id, ids[i]);
  EXPECT_FALSE(all->has_more);
  auto newest = (*store)->List("o", "", "", 2, false);
  ASSERT_TRUE(newest.ok());
  ASSERT_EQ(newest->files.size(), 2u);
  EXPECT_EQ(newest->files[0].id, ids[4]);
  EXPECT_TRUE(newest->has_more);
  auto next = (*store)->List("o", "", ids[3], 10, false);
  ASSERT_TRUE(next.ok());
  ASSERT_EQ(next->files.size(), 3u);
  EXPECT_EQ(next->files[0].id, ids[2]);
  EXPECT_EQ((*store)->List("o", "batch_output", "", 10, true)->files.size(), 0u);
  EXPECT_FALSE((*store)->List("o", "", "file-unknown", 10, true).ok());
}

TEST(FileStore, ExpiredFilesAreGoneRowAndContent) {
  TempDir t;
  auto dir = storage::DataDir::Open(t.path());
  ASSERT_TRUE(dir.ok());
  std::int64_t now = 1'800'000'000;
  batch::FileStoreOptions o;
  o.clock = [&now] { return now; };
  auto store = batch::FileStore::Open(**dir, o);
  ASSERT_TRUE(store.ok());
  auto brief = (*store)->Create("o", "brief", "batch", "x", /*expires_after=*/10);
  auto kept = (*store)->Create("o", "kept", "batch", "y");
  ASSERT_TRUE(brief.ok() && kept.ok());
  EXPECT_EQ(brief->created_at, now);
  EXPECT_EQ(brief->expires_at, now + 10);
  now += 9;  // one second before it expires
  EXPECT_TRUE((*store)->Get(brief->id, "o").ok());
  now += 1;  // expires_at: gone
  EXPECT_EQ((*store)->Get(brief->id, "o").status().code(), ErrorCode::kNotFound);
  auto listed = (*store)->List("o", "", "", 10, true);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->files.size(), 1u);
  EXPECT_EQ(listed->files[0].id, kept->id);
  EXPECT_FALSE(fs::exists(t.path() + "/files/" + brief->id));
  EXPECT_TRUE(fs::exists(t.path() + "/files/" + kept->id));
  EXPECT_EQ((*store)->total_bytes(), 1);
}

TEST(FileStore, QuarantinesOrphansAndKeepsWithinItsQuota) {
  TempDir t;
  {
    auto dir = storage::DataDir::Open(t.path());
    ASSERT_TRUE(dir.ok());
    batch::FileStoreOptions o;
    o.max_total_bytes = 10;
    auto store = batch::FileStore::Open(**dir, o);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Create("o", "a", "batch", "123456").ok());
    auto full = (*store)->Create("o", "b", "batch", "123456");
    ASSERT_FALSE(full.ok());
    EXPECT_EQ(full.status().code(), ErrorCode::kResourceExhausted);
    EXPECT_EQ((*store)->total_bytes(), 6);
    EXPECT_TRUE((*store)->quarantined().empty());
  }
  // What a crash between writing a content file and committing its row
  // leaves (and a temporary file): moved aside by the next Open, whole.
  WriteRaw(t.path() + "/files/file-0123", "orphan");
  WriteRaw(t.path() + "/files/file-0456.tmp-1", "half");
  fs::create_directories(t.path() + "/quarantine");
  WriteRaw(t.path() + "/quarantine/file-0123", "an earlier one of the same name");
  auto dir = storage::DataDir::Open(t.path());
  ASSERT_TRUE(dir.ok());
  auto store = batch::FileStore::Open(**dir);
  ASSERT_TRUE(store.ok());
  EXPECT_FALSE(fs::exists(t.path() + "/files/file-0123"));
  EXPECT_FALSE(fs::exists(t.path() + "/files/file-0456.tmp-1"));
  EXPECT_EQ(*ReadTextFile(t.path() + "/quarantine/file-0123.1"), "orphan");
  EXPECT_EQ(*ReadTextFile(t.path() + "/quarantine/file-0123"), "an earlier one of the same name");
  EXPECT_EQ(*ReadTextFile(t.path() + "/quarantine/file-0456.tmp-1"), "half");
  EXPECT_EQ((*store)->quarantined().size(), 2u);
  EXPECT_EQ((*store)->List("o", "", "", 10, true)->files.size(), 1u);
}

// A data directory holding three files; `contents` by id.
std::map<std::string, std::string> ThreeFiles(const std::string& path) {
  auto dir = storage::DataDir::Open(path);
  EXPECT_TRUE(dir.ok());
  auto store = batch::FileStore::Open(**dir);
  EXPECT_TRUE(store.ok());
  std::map<std::string, std::string> contents;
  for (int i = 0; i < 3; ++i) {
    const std::string content = "line " + std::to_string(i) + "\n" + std::string(3000 * i, 'x');
    auto f = (*store)->Create("o", "f" + std::to_string(i), "batch", content);
    EXPECT_TRUE(f.ok());
    contents[f->id] = content;
  }
  return contents;
}

// Opening `path` either fails naming `named`, having touched nothing
// under files/, or lists every file of `contents` with its content.
void RefusedOrIntact(const std::string& path, const std::map<std::string, std::string>& contents,
                     const std::string& named, const std::string& what) {
  auto dir = storage::DataDir::Open(path);
  ASSERT_TRUE(dir.ok());
  auto store = batch::FileStore::Open(**dir);
  if (!store.ok()) {
    EXPECT_NE(store.status().message().find(named), std::string::npos) << what << ": " << store.status().message();
  } else {
    for (const auto& [id, content] : contents) {
      auto got = (*store)->Content(id, "o");
      EXPECT_TRUE(got.ok()) << what << ": " << id << " is gone: " << got.status().message();
      if (got.ok()) {
        EXPECT_EQ(*got, content) << what;
      }
    }
    EXPECT_TRUE((*store)->quarantined().empty()) << what;
  }
  for (const auto& [id, content] : contents) {
    auto on_disk = ReadTextFile(path + "/files/" + id);
    ASSERT_TRUE(on_disk.ok()) << what << ": files/" << id << " was removed";
    EXPECT_EQ(*on_disk, content) << what;
  }
}

TEST(FileStore, ADamagedDatabaseIsRefusedNamingItAndNoFileIsLost) {
  TempDir t;
  const std::string intact = t.path() + "/intact";
  const auto contents = ThreeFiles(intact);
  const std::string db = intact + "/batch.db";
  const auto size = static_cast<std::int64_t>(fs::file_size(db));
  ASSERT_GE(size, 4 * 4096) << "the database should span several pages";
  auto copy = [&](const std::string& name) {
    const std::string to = t.path() + "/" + name;
    fs::copy(intact, to, fs::copy_options::recursive);
    fs::remove(to + "/lock");
    return to;
  };
  struct Damage {
    const char* name;
    std::int64_t keep;  // bytes of batch.db kept (-1: replaced by random bytes of the same size)
  };
  for (const Damage& d :
       {Damage{"empty", 0}, Damage{"header-only", 100}, Damage{"one-page", 4096}, Damage{"half", size / 2},
        Damage{"all-but-the-last-page", size - 4096}, Damage{"random-bytes", -1}}) {
    const std::string dir = copy(d.name);
    if (d.keep >= 0) {
      fs::resize_file(dir + "/batch.db", static_cast<std::uintmax_t>(d.keep));
    } else {
      std::mt19937 rng(7);
      std::string junk(static_cast<std::size_t>(size), '\0');
      for (char& c : junk) c = static_cast<char>(rng());
      WriteRaw(dir + "/batch.db", junk);
    }
    RefusedOrIntact(dir, contents, dir + "/batch.db", d.name);
    EXPECT_FALSE(fs::exists(dir + "/quarantine")) << d.name;
  }
  {
    // The 0-byte case must be a refusal: SQLite would take the file for a
    // new database, and every file for an orphan.
    const std::string dir = copy("empty-again");
    fs::resize_file(dir + "/batch.db", 0);
    auto data_dir = storage::DataDir::Open(dir);
    ASSERT_TRUE(data_dir.ok());
    auto store = batch::FileStore::Open(**data_dir);
    ASSERT_FALSE(store.ok());
    EXPECT_NE(store.status().message().find("is empty (0 bytes)"), std::string::npos) << store.status().message();
  }
  {
    // The database gone, its files there: refused, never a new database.
    const std::string dir = copy("no-database");
    fs::remove(dir + "/batch.db");
    auto data_dir = storage::DataDir::Open(dir);
    ASSERT_TRUE(data_dir.ok());
    auto store = batch::FileStore::Open(**data_dir);
    ASSERT_FALSE(store.ok());
    EXPECT_NE(store.status().message().find(dir + "/batch.db is missing"), std::string::npos)
        << store.status().message();
    EXPECT_FALSE(fs::exists(dir + "/batch.db"));
  }
  {
    // A write-ahead log without its database (files/ empty too): refused.
    const std::string dir = copy("wal-only");
    fs::remove(dir + "/batch.db");
    fs::remove_all(dir + "/files");
    WriteRaw(dir + "/batch.db-wal", std::string(4096, 'w'));
    auto data_dir = storage::DataDir::Open(dir);
    ASSERT_TRUE(data_dir.ok());
    auto store = batch::FileStore::Open(**data_dir);
    ASSERT_FALSE(store.ok());
    EXPECT_NE(store.status().message().find(dir + "/batch.db-wal"), std::string::npos) << store.status().message();
    EXPECT_FALSE(fs::exists(dir + "/batch.db"));
  }
}

// Uploads killed with SIGKILL at random moments, again and again on one
// data directory: every upload that was answered (Create returned) is
// listed with its whole content after each restart; nothing listed is
// partial; files the database does not list (an upload cut between its
// content and its row, a temporary file cut mid-write) are quarantined,
// never deleted. The child reports each answered upload on a pipe.
std::string UploadContent(int i) { return "upload " + std::to_string(i) + "\n" + std::string(997 * (i % 7), 'u'); }

TEST(FileStore, UploadsKilledAtRandomMomentsLoseNothingAnswered) {
  TempDir t;
  const std::string path = t.path() + "/data";
  const std::uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  std::map<std::string, std::string> answered;  // id -> content
  int next = 0;
  std::size_t quarantined = 0;
  for (int round = 0; round < 6; ++round) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const int first = next;
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(fds[0]);
      auto dir = storage::DataDir::Open(path);
      if (!dir.ok()) ::_exit(2);
      auto store = batch::FileStore::Open(**dir);
      if (!store.ok()) ::_exit(3);
      for (int i = first;; ++i) {
        auto f = (*store)->Create("o", "f" + std::to_string(i), "batch", UploadContent(i));
        if (!f.ok()) ::_exit(4);
        const std::string line = std::to_string(i) + " " + f->id + "\n";
        if (::write(fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) ::_exit(5);
      }
    }
    ::close(fds[1]);
    // Let it answer a few uploads, then kill it a few microseconds to a
    // few milliseconds later: inside a content write, between the content
    // and the row, inside the commit, or between uploads.
    std::string got;
    const auto wanted = static_cast<std::size_t>(1 + rng() % 4);
    char buf[4096];
    while (static_cast<std::size_t>(std::count(got.begin(), got.end(), '\n')) < wanted) {
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      ASSERT_GT(n, 0) << "the uploading child died on its own (seed " << seed << ")";
      got.append(buf, static_cast<std::size_t>(n));
    }
    ::usleep(static_cast<useconds_t>(rng() % 3000));
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited with " << status << " (seed " << seed << ")";
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
    ::close(fds[0]);
    std::istringstream lines(got);
    int index = 0;
    for (std::string id; lines >> index >> id;) {
      answered[id] = UploadContent(index);
      next = std::max(next, index + 1);
    }
    next += 1;  // the upload it was killed in (if any) keeps its number unused

    auto dir = storage::DataDir::Open(path);
    ASSERT_TRUE(dir.ok()) << dir.status().message();
    auto store = batch::FileStore::Open(**dir);
    ASSERT_TRUE(store.ok()) << "round " << round << " (seed " << seed << "): " << store.status().message();
    quarantined += (*store)->quarantined().size();
    for (const auto& [id, content] : answered) {
      auto c = (*store)->Content(id, "o");
      ASSERT_TRUE(c.ok()) << "round " << round << ": answered upload " << id << " lost (seed " << seed << ")";
      EXPECT_EQ(*c, content) << id;
    }
    // Whatever is listed is whole (a row never names a partial file), and
    // files/ holds exactly what is listed.
    auto listed = (*store)->List("o", "", "", 10000, true);
    ASSERT_TRUE(listed.ok());
    std::set<std::string> ids;
    for (const batch::FileInfo& f : listed->files) {
      ids.insert(f.id);
      const int i = std::stoi(f.filename.substr(1));
      auto c = (*store)->Content(f.id, "o");
      ASSERT_TRUE(c.ok());
      EXPECT_EQ(*c, UploadContent(i)) << f.filename << " is listed but not whole";
    }
    std::set<std::string> on_disk;
    for (const auto& e : fs::directory_iterator(path + "/files")) on_disk.insert(e.path().filename().string());
    EXPECT_EQ(on_disk, ids) << "round " << round;
  }
  std::printf("answered uploads kept: %zu; unlisted files quarantined: %zu (seed %llu)\n", answered.size(), quarantined,
              static_cast<unsigned long long>(seed));
  // Moved, not deleted: every file Open reported is in the quarantine.
  std::size_t kept = 0;
  if (fs::exists(path + "/quarantine"))
    for (const auto& e : fs::recursive_directory_iterator(path + "/quarantine")) kept += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(kept, quarantined);
}

TEST(FileStore, CommitsSurviveTheLossOfTheLog) {
  TempDir t;
  const std::string live = t.path() + "/live", restored = t.path() + "/restored";
  auto dir = storage::DataDir::Open(live);
  ASSERT_TRUE(dir.ok());
  auto store = batch::FileStore::Open(**dir);
  ASSERT_TRUE(store.ok());
  std::map<std::string, std::string> contents;
  for (int i = 0; i < 3; ++i) {
    auto f = (*store)->Create("o", "f", "batch", "content " + std::to_string(i));
    ASSERT_TRUE(f.ok());
    contents[f->id] = "content " + std::to_string(i);
  }
  // While the server runs (as a crash would leave it), batch.db and files/
  // copied without batch.db-wal: every committed row is in the file.
  fs::create_directories(restored);
  fs::copy(live + "/files", restored + "/files", fs::copy_options::recursive);
  fs::copy_file(live + "/batch.db", restored + "/batch.db");
  ASSERT_TRUE(fs::exists(live + "/batch.db-wal")) << "the live database should be in WAL mode";
  RefusedOrIntact(restored, contents, "", "restored without its log");
  auto reopened = storage::DataDir::Open(restored);
  ASSERT_TRUE(reopened.ok());
  EXPECT_TRUE(batch::FileStore::Open(**reopened).ok());
}

// A write the file system refuses (EFBIG under RLIMIT_FSIZE, as ENOSPC
// would be on a full disk) fails the call and leaves the store as it was:
// in a child process, which the limit and a failed write cannot harm.
TEST(FileStore, AFailedWriteLeavesTheStoreAsItWas) {
  TempDir t;
  const auto contents = ThreeFiles(t.path());
  for (const std::int64_t limit : {std::int64_t{1000}, std::int64_t{8}}) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      auto dir = storage::DataDir::Open(t.path());
      auto store = dir.ok() ? batch::FileStore::Open(**dir) : StatusOr<std::unique_ptr<batch::FileStore>>(dir.status());
      if (!store.ok()) ::_exit(3);
      ::signal(SIGXFSZ, SIG_IGN);
      const rlimit small{static_cast<rlim_t>(limit), static_cast<rlim_t>(limit)};
      ::setrlimit(RLIMIT_FSIZE, &small);
      // 1000 bytes: the content cannot be written; 8 bytes: the content
      // (4 bytes) can, the database's log cannot.
      auto f = (*store)->Create("o", "big", "batch", limit > 8 ? std::string(5000, 'b') : "tiny");
      ::_exit(f.ok() ? 4 : 0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "limit " << limit << ": exit " << status;
    RefusedOrIntact(t.path(), contents, "", "after a refused write, limit " + std::to_string(limit));
    auto dir = storage::DataDir::Open(t.path());
    ASSERT_TRUE(dir.ok());
    auto store = batch::FileStore::Open(**dir);
    ASSERT_TRUE(store.ok()) << store.status().message();
    EXPECT_EQ((*store)->List("o", "", "", 10, true)->files.size(), 3u);
    int on_disk = 0;
    for (const auto& e : fs::directory_iterator(t.path() + "/files")) on_disk += e.is_regular_file() ? 1 : 0;
    EXPECT_EQ(on_disk, 3) << "a content file of the failed upload was left behind";
  }
}

}  // namespace
}  // namespace ropeserve

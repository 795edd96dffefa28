// Both storage backends against real storage: the filesystem, and s3rver behind the SigV4 check.

#include "storage/storage.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "common/errors.hpp"
#include "common/job_id.hpp"
#include "gateway/gc.hpp"
#include "harness.hpp"
#include "redis/job_store.hpp"
#include "storage/object_keys.hpp"
#include "storage/resuming_source.hpp"

namespace relay::testing {
namespace {

std::string read_all(storage::Storage& st, const std::string& key, size_t piece = 100'000) {
  auto src = st.open(key, {});
  std::string out, buf(piece, '\0');
  while (size_t n = src->read(buf)) out.append(buf.data(), n);
  return out;
}

// A source of unknown length (forces multipart on S3).
class Unsized final : public ByteSource {
 public:
  explicit Unsized(std::string data) : inner_(std::move(data)) {}
  size_t read(std::span<char> buf) override { return inner_.read(buf); }

 private:
  MemorySource inner_;
};

struct Backend {
  std::string name;
  std::function<std::unique_ptr<storage::Storage>()> make;
};

class StorageTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    storage::Config c;
    if (GetParam() == "s3") {
      s3_ = std::make_unique<S3Server>();
      c.url = "s3://" + s3_->bucket() + "/pfx";
      c.s3_endpoint = s3_->endpoint();
      c.s3_path_style = true;
      c.s3_part_size = 5 << 20;  // S3's minimum part size: multipart with a few parts
      for (auto& [k, v] : s3_->env())
        if (k.starts_with("AWS_")) ::setenv(k.c_str(), v.c_str(), 1);
    } else {
      c.url = "file://" + dir_.path();
    }
    st_ = storage::make_storage(c);
  }
  TempDir dir_;
  std::unique_ptr<S3Server> s3_;
  std::unique_ptr<storage::Storage> st_;
};

TEST_P(StorageTest, PutGetRemoveRoundTrip) {
  MemorySource body("hello storage");
  st_->put("svc/a/input", body, {});
  EXPECT_EQ(read_all(*st_, "svc/a/input"), "hello storage");
  auto src = st_->open("svc/a/input", {});
  EXPECT_EQ(src->size(), 13u);
  st_->remove("svc/a/input");
  EXPECT_THROW(st_->open("svc/a/input", {}), storage::StorageError);
  EXPECT_NO_THROW(st_->remove("svc/a/input")) << "deleting a missing key is not an error";
}

// GC removes the objects of many jobs at once: every key goes, missing ones included (deleted
// already), whatever its characters.
TEST_P(StorageTest, RemoveManyRemovesEveryKeyMissingOnesIncluded) {
  std::vector<std::string> keys;
  for (const char* name : {"svc/a/input", "svc/a/result.json", "svc/b&c/input", "svc/d<e>/x"}) {
    MemorySource body(name);
    st_->put(name, body, {});
    keys.push_back(name);
  }
  keys.push_back("svc/never/input");
  st_->remove_many(keys);
  for (const auto& key : keys) EXPECT_THROW(st_->open(key, {}), storage::StorageError) << key;
  EXPECT_NO_THROW(st_->remove_many(keys)) << "all missing: not an error";
  EXPECT_NO_THROW(st_->remove_many({}));
}

std::string read_range(storage::Storage& st, const std::string& key, std::uint64_t first,
                       std::uint64_t length) {
  auto src = st.open_range(key, first, length, {});
  EXPECT_EQ(src->size(), length);
  std::string out, buf(7000, '\0');
  while (size_t n = src->read(buf)) out.append(buf.data(), n);
  return out;
}

TEST_P(StorageTest, AnyByteRangeOfAnObjectIsReadAlone) {
  std::string data(300'000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + i / 256);
  MemorySource body(data);
  st_->put("svc/r/result.json", body, {});
  EXPECT_EQ(st_->size_of("svc/r/result.json", {}), data.size());
  for (auto [first, length] : std::vector<std::pair<size_t, size_t>>{{0, 1},
                                                                     {0, data.size()},
                                                                     {1, data.size() - 1},
                                                                     {299'999, 1},
                                                                     {65'536, 100'000},
                                                                     {123'457, 17}})
    EXPECT_TRUE(read_range(*st_, "svc/r/result.json", first, length) == data.substr(first, length))
        << first << "+" << length;
  try {
    st_->size_of("svc/none/result.json", {});
    FAIL() << "a missing object has a size";
  } catch (const storage::StorageError& e) {
    EXPECT_EQ(e.kind(), storage::ErrorKind::not_found) << e.what();
  }
  EXPECT_THROW(st_->open_range("svc/none/result.json", 0, 1, {}), storage::StorageError);
}

TEST_P(StorageTest, MissingObjectIsNotFound) {
  try {
    st_->open("svc/nothing/input", {});
    FAIL() << "opened a missing object";
  } catch (const storage::StorageError& e) {
    EXPECT_EQ(e.kind(), storage::ErrorKind::not_found) << e.what();
  }
}

TEST_P(StorageTest, LargeAndUnknownLengthBodiesRoundTrip) {
  std::string data(12 * 1024 * 1024 + 123, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + (i >> 13));
  Unsized body(data);
  st_->put("svc/big/input", body, {});
  EXPECT_EQ(read_all(*st_, "svc/big/input"), data);
  // Read in pieces that are not a multiple of what the transport brings at a time (an S3 read
  // keeps what a callback brought beyond the caller's room for the next read).
  EXPECT_TRUE(read_all(*st_, "svc/big/input", 7) == data) << "7-byte reads";
  EXPECT_TRUE(read_all(*st_, "svc/big/input", 65537) == data) << "65537-byte reads";
}

TEST_P(StorageTest, EmptyObjectRoundTrips) {
  Unsized body("");
  st_->put("svc/empty/input", body, {});
  EXPECT_EQ(read_all(*st_, "svc/empty/input"), "");
}

TEST_P(StorageTest, OverwriteReplacesWhole) {
  MemorySource a(std::string(1000, 'a')), b("b");
  st_->put("svc/o/result.json", a, {});
  st_->put("svc/o/result.json", b, {});
  EXPECT_EQ(read_all(*st_, "svc/o/result.json"), "b");
}

bool exists(storage::Storage& st, const std::string& key) {
  try {
    st.open(key, {});
    return true;
  } catch (const storage::StorageError& e) {
    EXPECT_EQ(e.kind(), storage::ErrorKind::not_found) << e.what();
    return false;
  }
}

std::string pattern(size_t n) {
  std::string data(n, '\0');
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>(i * 13 + (i >> 11));
  return data;
}

// Pushed in uneven pieces, across part boundaries (5 MiB parts on S3), the object appears only
// at commit, whole. Sizes: empty, one byte, exactly one part (one PUT), and several parts.
// With its size known up front (a raw upload's Content-Length), a large object is one streamed
// PUT on S3 instead of parts; either way the same object results.
TEST_P(StorageTest, AWrittenObjectAppearsWholeAtCommit) {
  for (bool sized : {false, true})
    for (size_t n : {size_t{0}, size_t{1}, size_t{5} << 20, (size_t{11} << 20) + 7}) {
      const std::string data = pattern(n),
                        key = "svc/w" + std::to_string(n) + (sized ? "s" : "") + "/input";
      auto w = st_->create(key, {}, sized ? std::optional<std::uint64_t>(n) : std::nullopt);
      for (size_t i = 0, piece = 1; i < n; i += piece, piece = piece * 3 + 1)
        w->write(std::span<const char>(data.data() + i, std::min(piece, n - i)));
      EXPECT_FALSE(exists(*st_, key)) << "visible before commit, size " << n;
      w->commit();
      EXPECT_EQ(read_all(*st_, key), data) << n;
    }
}

// A writer dropped mid-way (the client went away) leaves no object, temporary or folder; on
// S3 its multipart upload (parts already sent) is aborted.
TEST_P(StorageTest, AnAbandonedWriterLeavesNothing) {
  const std::string data = pattern(size_t{7} << 20);
  for (bool sized : {false, true}) {
    auto w = st_->create("svc/gone/input", {},
                         sized ? std::optional<std::uint64_t>(2 * data.size()) : std::nullopt);
    w->write(data);
  }
  EXPECT_FALSE(exists(*st_, "svc/gone/input"));
  if (GetParam() == "file") {
    EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/svc/gone"));
  }
  // A declared size not met is an error at commit, and stores nothing.
  {
    auto w = st_->create("svc/short/input", {}, std::uint64_t{6} << 20);
    w->write(data.substr(0, 5 << 20));
    EXPECT_THROW(w->commit(), storage::StorageError);
  }
  EXPECT_FALSE(exists(*st_, "svc/short/input")) << GetParam();
  // The key is free for a later, complete write.
  auto w = st_->create("svc/gone/input", {}, std::nullopt);
  w->write(std::span<const char>(data.data(), 10));
  w->commit();
  EXPECT_EQ(read_all(*st_, "svc/gone/input"), data.substr(0, 10));
}

TEST_P(StorageTest, StoppedTransferIsAborted) {
  std::stop_source stop;
  stop.request_stop();
  MemorySource body("x");
  EXPECT_THROW(st_->put("svc/s/input", body, stop.get_token()), Aborted);
}

INSTANTIATE_TEST_SUITE_P(Backends, StorageTest, ::testing::Values("file", "s3"));

// The S3 backend on the test server, under prefix pfx/ (its credentials in the environment).
std::unique_ptr<storage::Storage> s3_storage(const S3Server& s3, std::int64_t part_size = 0) {
  storage::Config config;
  config.url = "s3://" + s3.bucket() + "/pfx";
  config.s3_endpoint = s3.endpoint();
  config.s3_path_style = true;
  if (part_size) config.s3_part_size = part_size;
  for (auto& [k, v] : s3.env())
    if (k.starts_with("AWS_")) ::setenv(k.c_str(), v.c_str(), 1);
  return storage::make_storage(config);
}

// ResumingSource against an S3 that drops connections: drops after some progress are ridden out
// however many (the bytes come whole, each once); a store that drops every transfer before a
// byte fails after kAttempts in a row, at its open or a read.
TEST(ResumingSource, RidesOutDroppedConnectionsAndGivesUpOnAStoreThatKeepsDropping) {
  struct Case {
    const char *cuts, *after;
    bool whole;
  } cases[] = {{"3", "70000", true}, {"99", "70000", true}, {"99", "0", false}};
  for (const auto& c : cases) {
    S3Server s3({}, {"--cut-gets", c.cuts, "--cut-match", "obj", "--cut-after", c.after});
    auto st = s3_storage(s3);
    std::string data(250'000, '\0');
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 13 + i / 333);
    MemorySource body(data);
    st->put("svc/j/obj", body, {});
    const std::string what = std::string(c.cuts) + " cuts after " + c.after;
    try {
      storage::ResumingSource src(*st, "svc/j/obj", {});
      EXPECT_EQ(src.size(), data.size());
      std::string got, buf(50'000, '\0');
      while (size_t n = src.read(buf)) got.append(buf.data(), n);
      EXPECT_TRUE(c.whole) << what << ": read whole";
      EXPECT_TRUE(got == data) << what << ": " << got.size();
    } catch (const storage::StorageError& e) {
      EXPECT_FALSE(c.whole) << what << ": " << e.what();
      EXPECT_EQ(e.kind(), storage::ErrorKind::unavailable);
      EXPECT_EQ(occurrences(s3.log(), "s3 fault: GET"),
                static_cast<size_t>(storage::ResumingSource::kAttempts))
          << what;
    }
  }
}

// One thread's requests go over one kept-alive connection (libcurl keeps its connections in the
// multi handle, which transfers on a thread now reuse): a relay's input read and result stored
// cost no TCP — with S3 over https, no TLS — handshake each. Before, every request opened one.
TEST(S3Storage, RequestsOnOneThreadReuseTheirConnection) {
  S3Server s3({}, {"--log-connections"});
  auto st = s3_storage(s3);
  for (int i = 0; i < 10; ++i) {
    const std::string key = "svc/j" + std::to_string(i) + "/input";
    const std::string data = "object " + std::to_string(i);
    MemorySource body(data);
    st->put(key, body, {});
    EXPECT_EQ(read_all(*st, key), data) << key;
  }
  // (One, unless the server closed an idle one meanwhile: a slow machine may see two.)
  EXPECT_LE(occurrences(s3.log(), "s3 connection opened"), 2u) << s3.log();
  EXPECT_GE(occurrences(s3.log(), "s3 connection opened"), 1u) << s3.log();
}

// GC's deletions go a thousand keys a request (DeleteObjects, with the Content-MD5 S3 requires:
// the test server refuses it without, as S3 does), not one request per object: a store ~20 ms
// away deleted ~25 jobs' objects a second that way, less than a busy deployment finishes.
TEST(S3Storage, RemoveManySendsAThousandKeysARequest) {
  S3Server s3({}, {"--log-requests"});
  auto st = s3_storage(s3);
  std::vector<std::string> keys;
  for (int i = 0; i < 1001; ++i) keys.push_back("svc/j" + std::to_string(i) + "/input");
  for (int i : {0, 999, 1000}) {
    MemorySource body("x");
    st->put(keys[i], body, {});
  }
  st->remove_many(keys);
  for (int i : {0, 999, 1000}) EXPECT_THROW(st->open(keys[i], {}), storage::StorageError);
  EXPECT_EQ(occurrences(s3.log(), "s3 request: POST /relay-test?delete="), 2u) << s3.log();
  EXPECT_EQ(occurrences(s3.log(), "s3 request: DELETE"), 0u) << s3.log();
}

// A store without DeleteObjects (501 NotImplemented, as some S3-compatible ones answer) has its
// keys deleted one request each.
TEST(S3Storage, RemoveManyFallsBackToADeleteAKeyWithoutDeleteObjects) {
  S3Server s3({}, {"--log-requests", "--no-delete-objects"});
  auto st = s3_storage(s3);
  std::vector<std::string> keys{"svc/a/input", "svc/a/result.json", "svc/b/input"};
  for (const auto& key : keys) {
    MemorySource body("x");
    st->put(key, body, {});
  }
  st->remove_many(keys);
  for (const auto& key : keys) EXPECT_THROW(st->open(key, {}), storage::StorageError) << key;
  EXPECT_EQ(occurrences(s3.log(), "s3 request: POST /relay-test?delete="), 1u) << s3.log();
  EXPECT_EQ(occurrences(s3.log(), "s3 request: DELETE"), 3u) << s3.log();
}

// GC works through a backlog a batch at a time (Gc::kBatch jobs): each batch's objects in one
// DeleteObjects request, its jobs forgotten in one round trip (one ZREM, one DEL), where each job
// cost two storage requests and two round trips before.
TEST(S3Storage, GcRemovesABacklogABatchAtATime) {
  S3Server s3({}, {"--log-requests"});
  auto st = s3_storage(s3);
  RedisServer redis;
  auto conn = redis.connect();
  const redis::Keys keys;
  const int jobs = gateway::Gc::kBatch + 100;
  std::vector<std::string> ids;
  std::vector<std::string> zadd{"ZADD", keys.gc_due("m1")};
  for (int i = 0; i < jobs; ++i) {
    ids.push_back(new_job_id());
    zadd.push_back("1000");
    zadd.push_back("m1/echo/" + ids.back());
  }
  conn.command(zadd);
  const std::vector<int> stored{0, gateway::Gc::kBatch - 1, jobs - 1};
  for (int i : stored) {
    MemorySource in("input"), out("result");
    st->put(input_object_key("echo", ids[i]), in, {});
    st->put(result_object_key("echo", ids[i]), out, {});
  }
  const std::string webhook = keys.webhook("m1", redis::JobStore::webhook_id(ids[1]));
  conn.command({"HSET", webhook, "url", "http://example.invalid/"});
  conn.command({"CONFIG", "RESETSTAT"});
  gateway::Gc gc({redis.endpoint(), keys, {"m1"}, st.get(), false, 100ms});
  EXPECT_EQ(gc.pass(), gateway::Gc::kBatch);
  EXPECT_EQ(gc.pass(), 100);
  EXPECT_EQ(gc.pass(), 0);
  EXPECT_EQ(redis::as_integer(conn.command({"ZCARD", keys.gc_due("m1")}).get()), 0);
  EXPECT_EQ(redis::as_integer(conn.command({"EXISTS", webhook}).get()), 0);
  for (int i : stored) {
    EXPECT_THROW(st->open(input_object_key("echo", ids[i]), {}), storage::StorageError) << i;
    EXPECT_THROW(st->open(result_object_key("echo", ids[i]), {}), storage::StorageError) << i;
  }
  EXPECT_EQ(occurrences(s3.log(), "s3 request: POST /relay-test?delete="), 2u) << s3.log();
  EXPECT_EQ(occurrences(s3.log(), "s3 request: DELETE"), 0u);
  const std::string stats = redis::as_string(conn.command({"INFO", "commandstats"}).get());
  EXPECT_NE(stats.find("cmdstat_zrem:calls=2,"), std::string::npos) << stats;
  EXPECT_NE(stats.find("cmdstat_del:calls=2,"), std::string::npos) << stats;
}

// S3 throttling or failing a PUT (503) is retried by the client, kPutAttempts tries in all, for
// an object from memory and for each part of a multipart upload; past that it fails unavailable.
TEST(S3Storage, APutRefusedFor503IsTriedAgain) {
  for (const char* fails : {"2", "3"}) {
    for (const char* match : {"small", "partNumber=2"}) {
      S3Server s3({}, {"--fail-puts", fails, "--fail-match", match});
      auto st = s3_storage(s3, 5 << 20);
      const bool small = std::string(match) == "small";
      std::string data(small ? 1000 : (12 << 20), 'd');
      for (size_t i = 0; i < data.size(); i += 4093) data[i] = static_cast<char>(i);
      const std::string key = small ? "svc/j/small" : "svc/j/large";
      const std::string what = std::string(match) + " refused " + fails + " times";
      try {
        if (small) {
          MemorySource body(data);
          st->put(key, body, {});
        } else {
          Unsized body(data);  // a multipart upload: parts from memory
          st->put(key, body, {});
        }
        EXPECT_EQ(std::string(fails), "2") << what;
        EXPECT_TRUE(read_all(*st, key) == data) << what;
      } catch (const storage::StorageError& e) {
        EXPECT_EQ(std::string(fails), "3") << what << ": " << e.what();
        EXPECT_EQ(e.kind(), storage::ErrorKind::unavailable) << what;
        EXPECT_THROW(st->open(key, {}), storage::StorageError) << what << ": nothing stored";
      }
      EXPECT_EQ(occurrences(s3.log(), "s3 fault: 503 for PUT"), std::stoul(fails)) << what;
    }
  }
}

// put() of a source larger than a part (the relay's result from its spool: its size known) goes
// in parts sent one at a time, and a part S3 refuses is sent again alone. It was one streamed PUT
// until 2026-12-06: a 503 at its end sent the whole object again, from the relay's retry.
TEST(S3Storage, APutLargerThanAPartSendsAgainOnlyThePartRefused) {
  S3Server s3({}, {"--log-puts", "--fail-puts", "2", "--fail-match", "partNumber=2&"});
  constexpr size_t kPart = 5 << 20;
  auto st = s3_storage(s3, kPart);
  std::string data(2 * kPart + 12345, 'd');
  for (size_t i = 0; i < data.size(); i += 4093) data[i] = static_cast<char>(i);
  MemorySource body(data);
  ASSERT_TRUE(body.size());
  st->put("svc/j/result.json", body, {});
  EXPECT_TRUE(read_all(*st, "svc/j/result.json") == data);
  // What went out, from the server's log: each part's PUTs and the bytes of all of them.
  std::map<std::string, int> puts;  // part number -> PUTs
  std::uint64_t sent = 0;
  std::istringstream log(s3.log());
  for (std::string line; std::getline(log, line);) {
    if (!line.starts_with("s3 put: ")) continue;
    const auto at = line.find("partNumber=");
    ASSERT_NE(at, std::string::npos) << "a PUT of the object whole: " << line;
    ++puts[line.substr(at + 11, line.find('&', at) - at - 11)];
    sent += std::stoull(line.substr(line.rfind(' ') + 1));
  }
  EXPECT_EQ(occurrences(s3.log(), "s3 fault: 503 for PUT"), 2u) << s3.log();
  EXPECT_EQ(puts, (std::map<std::string, int>{{"1", 1}, {"2", 3}, {"3", 1}})) << s3.log();
  EXPECT_EQ(sent, data.size() + 2 * kPart) << "the object once, and the refused part twice more";
}

// File storage rooted at `root`.
std::unique_ptr<storage::Storage> file_storage(const std::string& root) {
  storage::Config c;
  c.url = "file://" + root;
  return storage::make_storage(c);
}

TEST(FileStorage, KeysCannotEscapeTheRoot) {
  TempDir dir;
  auto st = file_storage(dir.path() + "/root");
  MemorySource body("x");
  for (const char* bad :
       {"../escape", "/abs", "a/../../b", "", "a/./b", "a/..", "..", ".", "a//../b"})
    EXPECT_THROW(st->put(bad, body, {}), storage::StorageError) << bad;
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/escape"));
}

TEST(FileStorage, AFailedWriteLeavesNothingBehind) {
  TempDir dir;
  auto st = file_storage(dir.path());
  class Failing final : public ByteSource {
   public:
    size_t read(std::span<char> buf) override {
      if (calls_++ > 0) throw std::runtime_error("source failed");
      buf[0] = 'x';
      return 1;
    }

   private:
    int calls_ = 0;
  } body;
  EXPECT_THROW(st->put("svc/f/result.json", body, {}), std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/svc/f"))
      << "no object, no temporary file, and not the job's folder it made";
}

// A writer skips the mkdir for a folder this thread has just read from or written to (a relay
// writes the result beside the input it read, after reading the next jobs' inputs when it takes
// ahead); a folder removed since is made again, and one never seen is made.
TEST(FileStorage, AResultLandsBesideItsInputWhateverWasReadOrRemovedSince) {
  namespace fs = std::filesystem;
  TempDir dir;
  auto st = file_storage(dir.path());
  for (int j = 0; j < 6; ++j) {
    MemorySource in("input " + std::to_string(j));
    st->put("svc/j" + std::to_string(j) + "/input", in, {});
  }
  // Inputs read ahead of the results, more than the writer remembers, then results for each.
  for (int j = 0; j < 6; ++j)
    EXPECT_EQ(read_all(*st, "svc/j" + std::to_string(j) + "/input"), "input " + std::to_string(j));
  for (int j = 5; j >= 0; --j) {
    MemorySource out("result " + std::to_string(j));
    st->put("svc/j" + std::to_string(j) + "/result.json", out, {});
    EXPECT_EQ(read_all(*st, "svc/j" + std::to_string(j) + "/result.json"),
              "result " + std::to_string(j));
  }
  // A folder read from, then removed (by the garbage collector, say): the write makes it again.
  EXPECT_EQ(read_all(*st, "svc/j0/input"), "input 0");
  fs::remove_all(dir.path() + "/svc/j0");
  MemorySource again("late");
  st->put("svc/j0/result.json", again, {});
  EXPECT_EQ(read_all(*st, "svc/j0/result.json"), "late");
  // Gone with its parent too: the whole path is made.
  fs::remove_all(dir.path() + "/svc");
  MemorySource deep("deep");
  st->put("svc/j0/result.json", deep, {});
  EXPECT_EQ(read_all(*st, "svc/j0/result.json"), "deep");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path() + "/svc/j0"), {}), 1)
      << "no temporary file left beside it";
}

// What a crashed writer left — temporaries and empty job folders — goes once it is old enough;
// an upload in progress (a fresh temporary) and stored objects stay.
TEST(FileStorage, SweepRemovesOldLeftoversOnly) {
  namespace fs = std::filesystem;
  TempDir dir;
  auto st = file_storage(dir.path());
  MemorySource kept("kept");
  st->put("svc/done/input", kept, {});
  fs::create_directories(dir.path() + "/svc/crashed");
  fs::create_directories(dir.path() + "/svc/fresh");
  fs::create_directories(dir.path() + "/svc/empty");
  std::ofstream(dir.path() + "/svc/crashed/input.tmp-1-0") << "partial";
  std::ofstream(dir.path() + "/svc/fresh/input.tmp-2-0") << "in progress";
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(2);
  for (const char* p :
       {"/svc/crashed/input.tmp-1-0", "/svc/crashed", "/svc/empty", "/svc/done", "/svc/done/input"})
    fs::last_write_time(dir.path() + p, old);
  EXPECT_EQ(st->sweep(std::chrono::hours(1)), 3u);  // the temporary, its folder, the empty one
  EXPECT_FALSE(fs::exists(dir.path() + "/svc/crashed"));
  EXPECT_FALSE(fs::exists(dir.path() + "/svc/empty"));
  EXPECT_TRUE(fs::exists(dir.path() + "/svc/fresh/input.tmp-2-0"));
  EXPECT_TRUE(fs::exists(dir.path() + "/svc/done/input"));
}

}  // namespace
}  // namespace relay::testing

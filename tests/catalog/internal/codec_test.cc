#include "catalog/internal/codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace gfrep::catalog::internal {
namespace {

TEST(CodecTest, BigEndianKeysSortNumerically) {
  std::vector<std::uint64_t> values = {0, 1, 255, 256, 65535, 1ull << 32, ~0ull - 1, ~0ull};
  for (std::size_t i = 1; i < values.size(); ++i) {
    EXPECT_LT(U64Key(values[i - 1]), U64Key(values[i]));
    EXPECT_EQ(*GetBigEndian64(U64Key(values[i])), values[i]);
  }
}

TEST(CodecTest, DentryKeysGroupByParentThenName) {
  // All children of parent 1 sort before any child of parent 2, whatever their names,
  // and within a parent by name bytes: a listing is one contiguous prefix range.
  std::vector<std::string> keys = {DentryKey(2, "a"), DentryKey(1, "zz"), DentryKey(1, "b"),
                                   DentryKey(256, ""), DentryKey(1, "\xff")};
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys[0], DentryKey(1, "b"));
  EXPECT_EQ(keys[1], DentryKey(1, "zz"));
  EXPECT_EQ(keys[2], DentryKey(1, "\xff"));
  EXPECT_EQ(keys[3], DentryKey(2, "a"));
  EXPECT_EQ(keys[4], DentryKey(256, ""));
  std::string prefix = DentryPrefix(1);
  EXPECT_TRUE(keys[2].starts_with(prefix));
  EXPECT_LT(keys[2], PrefixSuccessor(prefix));
  EXPECT_GE(keys[3], PrefixSuccessor(prefix));
}

TEST(CodecTest, NodeIndexKeysDoNotMixNodesThatArePrefixes) {
  // "n1" and "n10": the NUL terminator keeps n1's range free of n10's keys.
  std::string n1 = NodeReplicaKey("n1", 5);
  std::string n10 = NodeReplicaKey("n10", 1);
  EXPECT_TRUE(n1.starts_with(NodePrefix("n1")));
  EXPECT_FALSE(n10.starts_with(NodePrefix("n1")));
  EXPECT_LT(n1, n10);
}

TEST(CodecTest, PrefixSuccessorCarries) {
  EXPECT_EQ(PrefixSuccessor("ab"), "ac");
  EXPECT_EQ(PrefixSuccessor(std::string("a\xff", 2)), "b");
  EXPECT_EQ(PrefixSuccessor("\xff\xff"), "");
}

TEST(CodecTest, RecordsRoundTrip) {
  Attributes a;
  a.inode = 77;
  a.parent = 3;
  a.name = "f";
  a.type = FileType::kFile;
  a.size = 1ull << 40;
  a.mode = 0600;
  a.owner = "alice";
  a.mtime_ns = -5;
  a.checksum_algo = "xxh3-128";
  a.checksum = "abcdef";
  a.generation = 9;
  absl::StatusOr<Attributes> back = DecodeAttributes(EncodeAttributes(a));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->inode, 77u);
  EXPECT_EQ(back->mtime_ns, -5);
  EXPECT_EQ(back->checksum, "abcdef");
  EXPECT_EQ(back->generation, 9u);

  Task t;
  t.id = 4;
  t.spec.path = "/x";
  t.spec.src_node = "a";
  t.spec.dst_node = "b";
  t.spec.priority = -3;
  t.state = TaskState::kLeased;
  t.last_error = "boom";
  t.spec.streams = 4;
  t.spec.route_rate_bps = 500'000'000;
  t.spec.dst_share_ppm = 250'000;
  absl::StatusOr<Task> tb = DecodeTask(EncodeTask(t));
  ASSERT_TRUE(tb.ok());
  EXPECT_EQ(tb->spec.priority, -3);
  EXPECT_EQ(tb->spec.streams, 4u);
  EXPECT_EQ(tb->spec.route_rate_bps, 500'000'000u);
  EXPECT_EQ(tb->spec.dst_share_ppm, 250'000u);
  EXPECT_EQ(tb->state, TaskState::kLeased);
  EXPECT_EQ(tb->last_error, "boom");

  Site s{"kek", {{"region", "jp"}}};
  EXPECT_EQ(DecodeSite(EncodeSite(s))->labels.at("region"), "jp");
  Route r;
  r.src_site = "a";
  r.dst_site = "b";
  r.rtt_ms = 199.5;
  EXPECT_DOUBLE_EQ(DecodeRoute(EncodeRoute(r))->rtt_ms, 199.5);
}

TEST(CodecTest, TaskRecordsWithoutTheDestinationsPartStillDecode) {
  Task t;
  t.id = 9;
  t.spec.path = "/x";
  t.spec.streams = 2;
  t.spec.route_rate_bps = 300'000'000;
  t.spec.dst_share_ppm = 0;
  std::string old = EncodeTask(t);
  old.pop_back();  // the record as it was before dst_share_ppm (its 0 is one byte)
  absl::StatusOr<Task> from_old = DecodeTask(old);
  ASSERT_TRUE(from_old.ok()) << from_old.status();
  EXPECT_EQ(from_old->spec.dst_share_ppm, 0u);  // not known: the whole route
  EXPECT_EQ(from_old->spec.route_rate_bps, 300'000'000u);
  // A part over the whole (a corrupt or hostile record) reads as the whole.
  t.spec.dst_share_ppm = 5'000'000;
  absl::StatusOr<Task> over = DecodeTask(EncodeTask(t));
  ASSERT_TRUE(over.ok()) << over.status();
  EXPECT_EQ(over->spec.dst_share_ppm, kWholeRoutePpm);
}

TEST(CodecTest, NodeRecordsWithoutTheWorkerCountStillDecode) {
  Node n;
  n.name = "b1";
  n.site = "b";
  n.address = "10.0.0.2:7000";
  n.last_heartbeat_ns = 123;
  n.workers = 48;
  absl::StatusOr<Node> back = DecodeNode(EncodeNode(n));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->workers, 48u);
  EXPECT_EQ(back->last_heartbeat_ns, 123);
  // A record written before the field existed ends after last_heartbeat_ns (the field is
  // one varint byte for 0, then come the 21 bytes of an empty disk profile, the data-TLS
  // flag and the mode, one byte each, added later; this cut keeps the worker count's byte).
  n.workers = 0;
  std::string old = EncodeNode(n);
  old.resize(old.size() - 21 - 1 - 1);
  absl::StatusOr<Node> from_old = DecodeNode(old);
  ASSERT_TRUE(from_old.ok()) << from_old.status();
  EXPECT_EQ(from_old->workers, 0u);
  EXPECT_EQ(from_old->address, "10.0.0.2:7000");
}

TEST(CodecTest, NodeRecordsKeepTheDiskProfileAndOlderOnesStillDecode) {
  Node n;
  n.name = "b1";
  n.site = "b";
  n.workers = 3;
  std::string old = EncodeNode(n);  // the record as it was before the disk profile
  n.disk.dir = "/spool";
  n.disk.write_io_size_bytes = 4 << 20;
  n.disk.direct = true;
  n.disk.flush_interval_bytes = 64 << 20;
  n.disk.write_mbps = 500.5;
  n.disk.read_mbps = 900.25;
  n.disk.measured_ns = 42;
  n.requires_data_tls = true;
  n.mode = NodeMode::kDraining;
  absl::StatusOr<Node> back = DecodeNode(EncodeNode(n));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->disk.dir, "/spool");
  EXPECT_EQ(back->disk.write_io_size_bytes, 4u << 20);
  EXPECT_TRUE(back->disk.direct);
  EXPECT_EQ(back->disk.flush_interval_bytes, 64u << 20);
  EXPECT_DOUBLE_EQ(back->disk.write_mbps, 500.5);
  EXPECT_DOUBLE_EQ(back->disk.read_mbps, 900.25);
  EXPECT_EQ(back->disk.measured_ns, 42);
  EXPECT_TRUE(back->requires_data_tls);
  EXPECT_EQ(back->mode, NodeMode::kDraining);
  // Without the mode (the record of 2026-11-30): a normal node.
  std::string before_mode = EncodeNode(n);
  before_mode.resize(before_mode.size() - 1);
  absl::StatusOr<Node> no_mode = DecodeNode(before_mode);
  ASSERT_TRUE(no_mode.ok()) << no_mode.status();
  EXPECT_EQ(no_mode->mode, NodeMode::kNormal);
  EXPECT_TRUE(no_mode->requires_data_tls);
  // A mode this build does not know is a corrupt record, not a guess.
  std::string bad_mode = before_mode + std::string(1, '\x07');
  EXPECT_FALSE(DecodeNode(bad_mode).ok());
  // Cut the disk fields (and the data-TLS flag and mode after them) off: the record of
  // 2026-11-23.
  old.resize(old.size() - (1 + 0 + 1 + 1 + 1 + 8 + 8 + 1) - 1 - 1);
  absl::StatusOr<Node> from_old = DecodeNode(old);
  ASSERT_TRUE(from_old.ok()) << from_old.status();
  EXPECT_EQ(from_old->workers, 3u);
  EXPECT_EQ(from_old->disk.write_io_size_bytes, 0u);
  EXPECT_FALSE(from_old->requires_data_tls);
  EXPECT_EQ(from_old->mode, NodeMode::kNormal);
}

TEST(CodecTest, ReplicaRecordsKeepTheirStampAndNoteAndOlderOnesStillDecode) {
  Replica r;
  r.inode = 7;
  r.node = "c1";
  r.state = ReplicaState::kLost;
  r.generation = 3;
  r.size = 1000;
  r.verified_ns = 11;
  r.updated_ns = 12;
  r.mtime_ns = 1'700'000'000'123'456'789;
  r.note = "missing from the spool";
  absl::StatusOr<Replica> back = DecodeReplica(EncodeReplica(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->state, ReplicaState::kLost);
  EXPECT_EQ(back->mtime_ns, r.mtime_ns);
  EXPECT_EQ(back->note, r.note);
  EXPECT_EQ(back->updated_ns, 12);
  // A record written before the two fields existed ends after updated_ns (each is one byte
  // for 0 and "").
  r.state = ReplicaState::kComplete;
  r.mtime_ns = 0;
  r.note.clear();
  std::string old = EncodeReplica(r);
  old.resize(old.size() - 2);
  absl::StatusOr<Replica> from_old = DecodeReplica(old);
  ASSERT_TRUE(from_old.ok()) << from_old.status();
  EXPECT_EQ(from_old->mtime_ns, 0);
  EXPECT_EQ(from_old->updated_ns, 12);
  EXPECT_EQ(from_old->state, ReplicaState::kComplete);
}

TEST(CodecTest, RouteRecordsRoundTripWhatCopiesTaughtAndOlderOnesStillDecode) {
  Route r;
  r.src_site = "a";
  r.dst_site = "b";
  r.total_streams = 96;
  r.observed = {201.5, 290.25, 0.0001, 940'000'000, 77, 1 << 30, 88, "highspeed"};
  absl::StatusOr<Route> back = DecodeRoute(EncodeRoute(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->total_streams, 96u);
  EXPECT_DOUBLE_EQ(back->observed.rtt_ms, 201.5);
  EXPECT_DOUBLE_EQ(back->observed.srtt_ms, 290.25);
  EXPECT_DOUBLE_EQ(back->observed.loss, 0.0001);
  EXPECT_EQ(back->observed.peak_bps, 940'000'000u);
  EXPECT_EQ(back->observed.peak_ns, 77);
  EXPECT_EQ(back->observed.bytes, 1u << 30);
  EXPECT_EQ(back->observed.at_ns, 88);
  EXPECT_EQ(back->observed.congestion, "highspeed");
  // A record written between 2026-11-24 and 2026-11-26 ends before the congestion used (an
  // empty string: one byte).
  Route mid = r;
  mid.observed.congestion.clear();
  std::string mid_text = EncodeRoute(mid);
  mid_text.resize(mid_text.size() - 1 - 1);  // and the data-TLS flag
  absl::StatusOr<Route> from_mid = DecodeRoute(mid_text);
  ASSERT_TRUE(from_mid.ok()) << from_mid.status();
  EXPECT_EQ(from_mid->observed.at_ns, 88);
  EXPECT_EQ(from_mid->observed.congestion, "");
  // A record written before 2026-11-24 ends after total_streams: three doubles (24 bytes)
  // and five zero varints (one byte each, the empty congestion's length among them) shorter.
  r.observed = {};
  std::string old = EncodeRoute(r);
  old.resize(old.size() - 29 - 1);  // and the data-TLS flag of 2026-11-27
  absl::StatusOr<Route> from_old = DecodeRoute(old);
  ASSERT_TRUE(from_old.ok()) << from_old.status();
  EXPECT_EQ(from_old->total_streams, 96u);
  EXPECT_EQ(from_old->observed.at_ns, 0);
  // Cut inside the new fields: damaged, not silently short.
  EXPECT_EQ(DecodeRoute(EncodeRoute(r).substr(0, old.size() + 5)).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(CodecTest, EveryTruncationIsDataLoss) {
  Request r;
  r.id = 12;
  r.spec.paths = {"/a", "/b/c"};
  r.spec.dst_sites = {"x"};
  r.spec.parallel = 8;
  r.error = "none";
  std::string enc = EncodeRequest(r);
  ASSERT_TRUE(DecodeRequest(enc).ok());
  EXPECT_EQ(DecodeRequest(enc)->spec.parallel, 8u);
  // One byte short is a record from before `expanded`, two from before the origin (the next
  // test); shorter is damage.
  for (std::size_t n = 0; n + 2 < enc.size(); ++n) {
    EXPECT_EQ(DecodeRequest(enc.substr(0, n)).status().code(), absl::StatusCode::kDataLoss)
        << "truncated to " << n;
  }
  EXPECT_EQ(DecodeRequest(enc + "x").status().code(), absl::StatusCode::kDataLoss);
}

// The request's origin is stored; records written before it (no origin byte at the end)
// named the repairer's and the policies' requests in their owner, and decode to the origin.
TEST(CodecTest, ARequestsOriginIsStoredAndOlderRecordsGetItFromTheirOwner) {
  Request r;
  r.id = 3;
  r.spec.paths = {"/a"};
  r.spec.origin = RequestOrigin::kPolicy;
  r.spec.owner = "exp-in-japan";
  absl::StatusOr<Request> back = DecodeRequest(EncodeRequest(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->spec.origin, RequestOrigin::kPolicy);
  EXPECT_EQ(back->spec.owner, "exp-in-japan");
  auto old = [](Request x) {
    std::string text = EncodeRequest(x);
    text.resize(text.size() - 2);  // the origin and `expanded`: one varint byte each
    return DecodeRequest(text);
  };
  r.spec.origin = RequestOrigin::kUser;
  r.spec.owner = "policy:exp-in-japan";
  absl::StatusOr<Request> policy = old(r);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->spec.origin, RequestOrigin::kPolicy);
  EXPECT_EQ(policy->spec.owner, "exp-in-japan");
  r.spec.owner = "repair";
  EXPECT_EQ(old(r)->spec.origin, RequestOrigin::kRepair);
  r.spec.owner = "alice";
  EXPECT_EQ(old(r)->spec.origin, RequestOrigin::kUser);
  EXPECT_EQ(old(r)->spec.owner, "alice");
  // An origin out of range is damage, not a user's request.
  std::string bad = EncodeRequest(r);
  bad[bad.size() - 2] = 9;
  EXPECT_EQ(DecodeRequest(bad).status().code(), absl::StatusCode::kDataLoss);
  // Records from before issue 39 end after the origin: not expanded (listed again).
  r.expanded = true;
  EXPECT_TRUE(DecodeRequest(EncodeRequest(r))->expanded);
  std::string before = EncodeRequest(r);
  before.pop_back();
  absl::StatusOr<Request> unexpanded = DecodeRequest(before);
  ASSERT_TRUE(unexpanded.ok()) << unexpanded.status();
  EXPECT_FALSE(unexpanded->expanded);
  EXPECT_EQ(unexpanded->spec.owner, "alice");
}

TEST(CodecTest, RequestFilesKeepTheirSlowSourcesAndOlderRecordsDecodeWithNone) {
  RequestFile f;
  f.request_id = 3;
  f.id = 77;
  f.path = "/d/f";
  f.size = 9;
  f.state = RequestFileState::kWanted;
  f.reason = "straggler: slow";
  f.updated_ns = 5;
  f.slow_sources = {"a1", "a2"};
  absl::StatusOr<RequestFile> back = DecodeRequestFile(EncodeRequestFile(f));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->slow_sources, f.slow_sources);
  EXPECT_EQ(back->reason, f.reason);
  // A record from before slow sources: it ends after updated_ns (a count of 0 is one byte).
  f.slow_sources.clear();
  std::string old = EncodeRequestFile(f);
  old.pop_back();
  back = DecodeRequestFile(old);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->slow_sources.empty());
  EXPECT_EQ(back->updated_ns, 5);
}

TEST(CodecTest, RandomBytesNeverCrashTheDecoders) {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 2000; ++i) {
    std::string junk(rng() % 64, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    if (!junk.empty() && i % 2 == 0) junk[0] = 1;  // right version byte, wrong body
    (void)DecodeAttributes(junk);  // ignored: only must not crash
    (void)DecodeTask(junk);
    (void)DecodeRequest(junk);
    (void)DecodeSite(junk);
    (void)DecodeEvent(junk);
  }
}

}  // namespace
}  // namespace gfrep::catalog::internal

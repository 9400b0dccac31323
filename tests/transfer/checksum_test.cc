#include "transfer/checksum.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"

namespace gfrep::transfer {
namespace {

TEST(ChecksumTest, Sha256KnownVectors) {
  EXPECT_EQ(ChecksumOf(ChecksumAlgorithm::kSha256, ""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(ChecksumOf(ChecksumAlgorithm::kSha256, "abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(ChecksumTest, Adler32KnownVectors) {
  EXPECT_EQ(ChecksumOf(ChecksumAlgorithm::kAdler32, ""), "adler32:00000001");
  EXPECT_EQ(ChecksumOf(ChecksumAlgorithm::kAdler32, "Wikipedia"), "adler32:11e60398");
  // Long input exercises the modulo batching.
  std::string big(100000, '\xff');
  std::uint32_t a = 1, b = 0;
  for (unsigned char c : big) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  EXPECT_EQ(Adler32(1, big.data(), big.size()), (b << 16) | a);
}

TEST(ChecksumTest, Crc32cKnownVectors) {
  EXPECT_EQ(Crc32c(0, "123456789", 9), 0xE3069283u);
  std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(0, zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
}

TEST(ChecksumTest, Xxh3KnownVectors) {
  // XXH3_128bits("") and XXH3_64bits("") from the xxHash reference.
  EXPECT_EQ(ChecksumOf(ChecksumAlgorithm::kXxh3_128, ""),
            "xxh3-128:99aa06d3014798d86001c324468d497f");
  EXPECT_EQ(BlockChecksum(BlockChecksumAlgorithm::kXxh3_64, "", 0), 0x2D06800538D394C2ull);
}

TEST(ChecksumTest, IncrementalEqualsOneShot) {
  std::string data(1 << 20, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + (i >> 9));
  for (ChecksumAlgorithm alg : {ChecksumAlgorithm::kXxh3_128, ChecksumAlgorithm::kAdler32,
                                ChecksumAlgorithm::kSha256, ChecksumAlgorithm::kXxh3Tree}) {
    FileHasher h(alg);
    for (std::size_t off = 0; off < data.size(); off += 77777) {
      h.Update(data.data() + off, std::min<std::size_t>(77777, data.size() - off));
    }
    EXPECT_EQ(h.Finish(), ChecksumOf(alg, data)) << ChecksumAlgorithmName(alg);
  }
}

TEST(ChecksumTest, FileChecksumMatchesInMemory) {
  testing::TempDir dir("checksum");
  testing::WriteRandomFile(dir.path() / "f", 3'000'000, 1);
  std::string content = testing::ReadFile(dir.path() / "f");
  absl::StatusOr<std::string> sum = ComputeFileChecksum(dir.path() / "f", ChecksumAlgorithm::kSha256);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(*sum, ChecksumOf(ChecksumAlgorithm::kSha256, content));
  EXPECT_TRUE(absl::IsNotFound(ComputeFileChecksum(dir.path() / "missing", ChecksumAlgorithm::kSha256).status()));
}

TEST(ChecksumTest, ParsesNames) {
  EXPECT_EQ(*ParseChecksumAlgorithm("xxh3-128"), ChecksumAlgorithm::kXxh3_128);
  EXPECT_EQ(*ParseChecksumAlgorithm("xxh3-tree"), ChecksumAlgorithm::kXxh3Tree);
  EXPECT_EQ(ChecksumAlgorithmName(ChecksumAlgorithm::kXxh3Tree), "xxh3-tree");
  EXPECT_EQ(*ParseChecksumAlgorithm("adler32"), ChecksumAlgorithm::kAdler32);
  EXPECT_EQ(*ParseChecksumAlgorithm("sha256"), ChecksumAlgorithm::kSha256);
  EXPECT_TRUE(absl::IsInvalidArgument(ParseChecksumAlgorithm("md5").status()));
  EXPECT_EQ(*ParseBlockChecksumAlgorithm("crc32c"), BlockChecksumAlgorithm::kCrc32c);
  EXPECT_TRUE(absl::IsInvalidArgument(ParseBlockChecksumAlgorithm("none").status()));
}

std::string Pattern(std::size_t size, unsigned seed) {
  std::string data(size, '\0');
  for (std::size_t i = 0; i < size; ++i) data[i] = static_cast<char>(i * 131 + (i >> 9) + seed);
  return data;
}

// xxh3-tree written out from its definition with plain xxHash calls.
std::string TreeByDefinition(const std::string& data) {
  std::string digests;
  for (std::size_t off = 0; off < data.size(); off += kTreeLeafBytes) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(
        &c, XXH3_128bits(data.data() + off, std::min<std::size_t>(kTreeLeafBytes, data.size() - off)));
    digests.append(reinterpret_cast<const char*>(c.digest), sizeof(c.digest));
  }
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(digests.data(), digests.size()));
  std::string hex;
  for (unsigned char b : c.digest) hex += fmt::format("{:02x}", b);
  return "xxh3-tree:" + hex;
}

constexpr std::size_t kLeaf = kTreeLeafBytes;

TEST(ChecksumTest, TreeIsTheHashOfItsLeafHashes) {
  for (std::size_t size : {std::size_t{0}, std::size_t{1}, kLeaf - 1, kLeaf, kLeaf + 1, 3 * kLeaf + 12345}) {
    std::string data = Pattern(size, 7);
    FileHasher h(ChecksumAlgorithm::kXxh3Tree);
    for (std::size_t off = 0; off < size; off += 300001)
      h.Update(data.data() + off, std::min<std::size_t>(300001, size - off));
    EXPECT_EQ(h.Finish(), TreeByDefinition(data)) << size;
  }
  // Not the same as xxh3-128 of the bytes, and it sees a flipped byte in any leaf.
  std::string data = Pattern(3 * kLeaf + 5, 1);
  std::string sum = ChecksumOf(ChecksumAlgorithm::kXxh3Tree, data);
  EXPECT_NE(sum.substr(10), ChecksumOf(ChecksumAlgorithm::kXxh3_128, data).substr(9));
  for (std::size_t at : {std::size_t{0}, kLeaf, 3 * kLeaf + 4}) {
    std::string bad = data;
    bad[at] ^= 1;
    EXPECT_NE(ChecksumOf(ChecksumAlgorithm::kXxh3Tree, bad), sum) << at;
  }
}

TEST(ChecksumTest, TreeFromLeavesInAnyOrderEqualsTheFileHash) {
  const std::size_t size = 9 * kLeaf + 777;
  std::string data = Pattern(size, 3);
  TreeChecksum tree(size);
  LeafHasher leaves;
  // Frames of 2 leaves, last first; each fed in pieces that straddle the leaves.
  std::vector<std::size_t> offsets;
  for (std::size_t off = 0; off < size; off += 2 * kLeaf) offsets.push_back(off);
  for (auto it = offsets.rbegin(); it != offsets.rend(); ++it) {
    const std::size_t len = std::min<std::size_t>(2 * kLeaf, size - *it);
    ASSERT_TRUE(IsTreeFrame(*it, len, size));
    leaves.Reset(len);
    for (std::size_t p = 0; p < len; p += 262145)
      leaves.Update(data.data() + *it + p, std::min<std::size_t>(262145, len - p));
    const std::vector<LeafDigest>& d = leaves.digests();
    EXPECT_EQ(leaves.BlockCheck(), XXH3_64bits(d.data(), d.size() * sizeof(LeafDigest)));
    tree.Set(*it / kLeaf, d);
  }
  EXPECT_EQ(tree.missing_bytes(), 0u);
  EXPECT_EQ(tree.Finish(), ChecksumOf(ChecksumAlgorithm::kXxh3Tree, data));
}

TEST(ChecksumTest, BlockCheckOfATreeFrameSeesAFlippedByte) {
  std::string data = Pattern(4 * kLeaf, 9);
  LeafHasher h;
  h.Reset(data.size());
  h.Update(data.data(), data.size());
  const std::uint64_t good = h.BlockCheck();
  data[3 * kLeaf + 10] ^= 0x40;
  h.Reset(data.size());
  h.Update(data.data(), data.size());
  EXPECT_NE(h.BlockCheck(), good);
}

TEST(ChecksumTest, BlockHasherChecksBytesOrATreeFramesLeaves) {
  std::string data = Pattern(2 * kLeaf + 100, 5);
  for (BlockChecksumAlgorithm alg : {BlockChecksumAlgorithm::kXxh3_64, BlockChecksumAlgorithm::kCrc32c}) {
    BlockHasher h(alg);
    h.Reset(data.size(), false);
    for (std::size_t p = 0; p < data.size(); p += 100000)
      h.Update(data.data() + p, std::min<std::size_t>(100000, data.size() - p));
    EXPECT_EQ(h.Finish(), BlockChecksum(alg, data.data(), data.size())) << BlockChecksumAlgorithmName(alg);
    // A tree frame: its leaves always; the check is theirs under xxh3-64, crc32c's otherwise.
    h.Reset(data.size(), true);
    h.Update(data.data(), data.size());
    LeafHasher leaves;
    leaves.Reset(data.size());
    leaves.Update(data.data(), data.size());
    const std::uint64_t want = alg == BlockChecksumAlgorithm::kXxh3_64
                                   ? leaves.BlockCheck()
                                   : BlockChecksum(alg, data.data(), data.size());
    EXPECT_EQ(h.Finish(), want) << BlockChecksumAlgorithmName(alg);
    EXPECT_EQ(h.leaves(), leaves.digests()) << BlockChecksumAlgorithmName(alg);
  }
}

TEST(ChecksumTest, TreeFramesStartAndEndOnLeaves) {
  EXPECT_TRUE(IsTreeFrame(0, 4 * kLeaf, 100 * kLeaf));
  EXPECT_TRUE(IsTreeFrame(4 * kLeaf, 4 * kLeaf, 100 * kLeaf));
  EXPECT_TRUE(IsTreeFrame(8 * kLeaf, 5, 8 * kLeaf + 5));  // the short end of the file
  EXPECT_TRUE(IsTreeFrame(0, 5, 5));
  EXPECT_FALSE(IsTreeFrame(kLeaf / 4, kLeaf, 100 * kLeaf));
  EXPECT_FALSE(IsTreeFrame(0, kLeaf / 4, 100 * kLeaf));
  EXPECT_FALSE(IsTreeFrame(kLeaf, 0, 100 * kLeaf));
}

TEST(ChecksumTest, MissingLeavesAreReadFromTheFile) {
  testing::TempDir dir("checksum");
  const std::size_t size = 5 * kLeaf + 99;
  testing::WriteRandomFile(dir.path() / "f", size, 2);
  std::string content = testing::ReadFile(dir.path() / "f");
  TreeChecksum tree(size);
  LeafHasher h;
  h.Reset(2 * kLeaf);
  h.Update(content.data() + 2 * kLeaf, 2 * kLeaf);
  tree.Set(2, h.digests());
  EXPECT_EQ(tree.missing_bytes(), 3 * kLeaf + 99);
  int fd = ::open((dir.path() / "f").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(tree.FillFromFd(fd).ok());
  EXPECT_EQ(tree.missing_bytes(), 0u);
  EXPECT_EQ(tree.Finish(), *ComputeFileChecksum(dir.path() / "f", ChecksumAlgorithm::kXxh3Tree));
  // A file shorter than the checksum expects is an error, not a checksum.
  TreeChecksum longer(size + kLeaf);
  EXPECT_TRUE(absl::IsAborted(longer.FillFromFd(fd)));
  ::close(fd);
}

}  // namespace
}  // namespace gfrep::transfer

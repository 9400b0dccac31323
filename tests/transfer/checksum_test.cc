#include "transfer/checksum.h"

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
  for (ChecksumAlgorithm alg :
       {ChecksumAlgorithm::kXxh3_128, ChecksumAlgorithm::kAdler32, ChecksumAlgorithm::kSha256}) {
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
  EXPECT_EQ(*ParseChecksumAlgorithm("adler32"), ChecksumAlgorithm::kAdler32);
  EXPECT_EQ(*ParseChecksumAlgorithm("sha256"), ChecksumAlgorithm::kSha256);
  EXPECT_TRUE(absl::IsInvalidArgument(ParseChecksumAlgorithm("md5").status()));
  EXPECT_EQ(*ParseBlockChecksumAlgorithm("crc32c"), BlockChecksumAlgorithm::kCrc32c);
  EXPECT_TRUE(absl::IsInvalidArgument(ParseBlockChecksumAlgorithm("none").status()));
}

}  // namespace
}  // namespace gfrep::transfer

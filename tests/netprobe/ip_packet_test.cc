#include "netprobe/internal/ip_packet.h"

#include <gtest/gtest.h>

#include <vector>

namespace gfrep::netprobe::internal {
namespace {

std::vector<std::uint8_t> Ipv4(std::size_t total, std::size_t read) {
  std::vector<std::uint8_t> p(read, 0);
  if (read >= 4) {
    p[0] = 0x45;
    p[2] = static_cast<std::uint8_t>(total >> 8);
    p[3] = static_cast<std::uint8_t>(total & 0xff);
  }
  return p;
}

std::vector<std::uint8_t> Ipv6(std::size_t payload, std::size_t read) {
  std::vector<std::uint8_t> p(read, 0);
  if (read >= 6) {
    p[0] = 0x60;
    p[4] = static_cast<std::uint8_t>(payload >> 8);
    p[5] = static_cast<std::uint8_t>(payload & 0xff);
  }
  return p;
}

TEST(CheckIpPacketTest, AcceptsConsistentPackets) {
  EXPECT_TRUE(CheckIpPacket(Ipv4(20, 20)).ok());
  EXPECT_TRUE(CheckIpPacket(Ipv4(9000, 9000)).ok());
  EXPECT_TRUE(CheckIpPacket(Ipv6(0, 40)).ok());
  EXPECT_TRUE(CheckIpPacket(Ipv6(8960, 9000)).ok());
}

TEST(CheckIpPacketTest, RejectsTruncatedAndInconsistentPackets) {
  EXPECT_FALSE(CheckIpPacket({}).ok());
  EXPECT_FALSE(CheckIpPacket(Ipv4(20, 19)).ok());
  EXPECT_FALSE(CheckIpPacket(Ipv4(100, 60)).ok());   // length field beyond the bytes read
  EXPECT_FALSE(CheckIpPacket(Ipv4(60, 100)).ok());   // trailing garbage
  EXPECT_FALSE(CheckIpPacket(Ipv6(100, 39)).ok());
  EXPECT_FALSE(CheckIpPacket(Ipv6(100, 120)).ok());
  auto bad_ihl = Ipv4(40, 40);
  bad_ihl[0] = 0x44;  // header length 16 < 20
  EXPECT_FALSE(CheckIpPacket(bad_ihl).ok());
  bad_ihl[0] = 0x4f;  // header length 60 > total 40
  EXPECT_FALSE(CheckIpPacket(bad_ihl).ok());
  auto v5 = Ipv4(40, 40);
  v5[0] = 0x55;
  absl::Status s = CheckIpPacket(v5);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.ToString().find("version 5"), std::string::npos);
}

TEST(CheckIpPacketTest, RejectsOversizedBuffer) {
  std::vector<std::uint8_t> huge(kMaxPacketBytes + 1, 0);
  huge[0] = 0x45;
  EXPECT_FALSE(CheckIpPacket(huge).ok());
}

}  // namespace
}  // namespace gfrep::netprobe::internal

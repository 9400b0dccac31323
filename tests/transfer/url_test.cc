#include "transfer/url.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gfrep::transfer {
namespace {

TEST(UrlTest, ParsesGfUrls) {
  absl::StatusOr<GfUrl> u = ParseGfUrl("gf://127.0.0.1:7000/run/a.dat");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->endpoint.host, "127.0.0.1");
  EXPECT_EQ(u->endpoint.port, 7000);
  EXPECT_EQ(u->path, "run/a.dat");
  absl::StatusOr<GfUrl> v6 = ParseGfUrl("gf://[::1]:9/x");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->endpoint.host, "::1");
  for (const char* bad :
       {"gf://host/x", "gf://host:99999/x", "gf://host:1", "gf://host:1/", "http://h:1/x"}) {
    EXPECT_FALSE(ParseGfUrl(bad).ok()) << bad;
  }
}

TEST(UrlTest, EndpointsParseBackFromToString) {
  for (const char* text : {"localhost:0", "10.0.0.1:65535", "[::1]:7000", "fe80::1%eth0:443",
                           "[fe80::1%eth0]:443", "site-a.example.org:00080"}) {
    absl::StatusOr<Endpoint> e = ParseEndpoint(text);
    ASSERT_TRUE(e.ok()) << text << ": " << e.status();
    absl::StatusOr<Endpoint> back = ParseEndpoint(e->ToString());
    ASSERT_TRUE(back.ok()) << e->ToString();
    EXPECT_EQ(back->host, e->host);
    EXPECT_EQ(back->port, e->port);
  }
  EXPECT_EQ(ParseEndpoint("fe80::1%eth0:443")->host, "fe80::1%eth0");
}

// Found by tests/fuzz/url_fuzz.cc: "[]:80" was accepted with an empty host (its ToString,
// ":80", is refused), and "a]:b:80" with the host "a]:b", whose ToString "[a]:b]:80" does
// not parse.
TEST(UrlTest, RefusesHostsThatDoNotParseBack) {
  const std::string too_long(kMaxHostBytes + 1, 'h');
  for (const std::string& bad :
       std::vector<std::string>{"[]:80", "a]:b:80", "[[::1]:80", "a b:80", "a/b:80", "\xff:80",
                                "tab\t:80", too_long + ":80"}) {
    absl::StatusOr<Endpoint> e = ParseEndpoint(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(e.status())) << bad;
  }
  EXPECT_TRUE(ParseEndpoint(std::string(kMaxHostBytes, 'h') + ":80").ok());
  EXPECT_TRUE(absl::IsInvalidArgument(ParseGfUrl("gf://[]:80/x").status()));
}

}  // namespace
}  // namespace gfrep::transfer

#include "catalog/types.h"

#include <gtest/gtest.h>

#include <string>

namespace gfrep::catalog {
namespace {

TEST(ValidateNameTest, AcceptsOrdinaryNames) {
  EXPECT_TRUE(ValidateName("a").ok());
  EXPECT_TRUE(ValidateName("run001.mdst").ok());
  EXPECT_TRUE(ValidateName("...").ok());
  EXPECT_TRUE(ValidateName(std::string(255, 'x')).ok());
}

TEST(ValidateNameTest, RejectsEachForbiddenForm) {
  for (std::string bad : {std::string(""), std::string("."), std::string(".."),
                          std::string("a/b"), std::string("a\0b", 3), std::string(256, 'x')}) {
    absl::Status s = ValidateName(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "name of size " << bad.size();
  }
}

// Issue 37: a name with a newline was stored and then written raw into logs (forged lines).
TEST(ValidateNameTest, RefusesControlCharactersWithoutEchoingThem) {
  for (std::string bad : {std::string("a\nb"), std::string("x\r"), std::string("\x1b[31m"),
                          std::string("tab\there"), std::string("del\x7f")}) {
    absl::Status s = ValidateName(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "name of size " << bad.size();
    EXPECT_NE(std::string(s.message()).find("control character 0x"), std::string::npos) << s;
    for (char c : std::string(s.message())) {
      EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20) << "the message echoes a control byte";
    }
  }
  EXPECT_TRUE(ValidateName("caf\xc3\xa9 ~!").ok());
}

TEST(ValidateNameTest, RequiresUtf8AsProtobufDoes) {
  EXPECT_TRUE(ValidateName("caf\xc3\xa9").ok());                  // é
  EXPECT_TRUE(ValidateName("\xf0\x9f\x93\x81").ok());             // U+1F4C1
  for (std::string bad : {std::string("caf\xe9"),                   // Latin-1
                          std::string("\xc0\xaf"),                  // overlong '/'
                          std::string("\xed\xa0\x80"),              // surrogate
                          std::string("\xf4\x90\x80\x80"),          // above U+10FFFF
                          std::string("a\xe2\x82")}) {              // cut sequence
    absl::Status s = ValidateName(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(std::string(s.message()).find("UTF-8"), std::string::npos) << s;
  }
}

TEST(TruncateUtf8Test, NeverCutsASequence) {
  const std::string text = "ab\xc3\xa9\xe2\x82\xac";  // a b é €
  EXPECT_EQ(TruncateUtf8(text, 100), text);
  EXPECT_EQ(TruncateUtf8(text, 4), "ab\xc3\xa9");
  EXPECT_EQ(TruncateUtf8(text, 3), "ab");
  EXPECT_EQ(TruncateUtf8(text, 6), "ab\xc3\xa9");
  for (std::size_t n = 0; n <= text.size(); ++n) EXPECT_TRUE(IsValidUtf8(TruncateUtf8(text, n)));
}

TEST(SplitPathTest, NormalisesSlashes) {
  absl::StatusOr<std::vector<std::string>> p = SplitPath("/a//b/");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(SplitPath("/")->empty());
  EXPECT_EQ(JoinPath(*p), "/a/b");
  EXPECT_EQ(JoinPath({}), "/");
}

TEST(SplitPathTest, RejectsRelativeDotsAndOverlong) {
  EXPECT_EQ(SplitPath("a/b").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitPath("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitPath("/a/../b").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitPath("/a/./b").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitPath(std::string("/a\0b", 4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::string longest = "/" + std::string(200, 'a');
  while (longest.size() + 201 <= kMaxPathBytes) longest += "/" + std::string(200, 'a');
  EXPECT_TRUE(SplitPath(longest).ok());
  std::string too_long = "/" + std::string(100, 'a');
  while (too_long.size() <= kMaxPathBytes) too_long += "/" + std::string(100, 'a');
  EXPECT_EQ(SplitPath(too_long).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StateNamesTest, RoundTrip) {
  for (ReplicaState s : {ReplicaState::kPending, ReplicaState::kComplete, ReplicaState::kStale,
                         ReplicaState::kCorrupt, ReplicaState::kDeleting}) {
    EXPECT_EQ(*ParseReplicaState(ToString(s)), s);
  }
  EXPECT_FALSE(ParseReplicaState("bogus").ok());
  EXPECT_EQ(*ParseTaskState("leased"), TaskState::kLeased);
  EXPECT_EQ(*ParseRequestState("done"), RequestState::kDone);
  for (RequestOrigin o : {RequestOrigin::kUser, RequestOrigin::kPolicy, RequestOrigin::kRepair}) {
    EXPECT_EQ(*ParseRequestOrigin(ToString(o)), o);
  }
  EXPECT_FALSE(ParseRequestOrigin("policy:x").ok());
}

TEST(RequestTest, FinishedMeansDoneFailedOrCancelled) {
  EXPECT_FALSE(IsFinished(RequestState::kQueued));
  EXPECT_FALSE(IsFinished(RequestState::kRunning));
  EXPECT_TRUE(IsFinished(RequestState::kDone));
  EXPECT_TRUE(IsFinished(RequestState::kFailed));
  EXPECT_TRUE(IsFinished(RequestState::kCancelled));
}

TEST(RequestTest, APolicysRequestIsShownWithItsRule) {
  RequestSpec spec;
  spec.owner = "exp-in-japan";
  EXPECT_EQ(DescribeOwner(spec), "exp-in-japan");
  spec.origin = RequestOrigin::kPolicy;
  EXPECT_EQ(DescribeOwner(spec), "policy:exp-in-japan");
  spec.origin = RequestOrigin::kRepair;
  spec.owner = "repair";
  EXPECT_EQ(DescribeOwner(spec), "repair");
}

}  // namespace
}  // namespace gfrep::catalog

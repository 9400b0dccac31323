#include "transfer/internal/json_fields.h"

#include <gtest/gtest.h>

namespace gfrep::transfer::internal {
namespace {

TEST(JsonFieldsTest, ReadsFieldsOfTheRightType) {
  Json j = Json::parse(R"({"s":"x","u":7,"i":-3,"b":true,"d":1.5,"o":{},"a":[1]})");
  EXPECT_EQ(*GetString(j, "s"), "x");
  EXPECT_EQ(*GetUint(j, "u"), 7u);
  EXPECT_EQ(*GetInt(j, "i"), -3);
  EXPECT_EQ(*GetInt(j, "u"), 7);
  EXPECT_TRUE(*GetBool(j, "b"));
  EXPECT_EQ(*GetDouble(j, "d"), 1.5);
  EXPECT_EQ(*GetDouble(j, "u"), 7.0);
  EXPECT_TRUE((*GetObject(j, "o"))->is_object());
  EXPECT_EQ((*GetArray(j, "a"))->size(), 1u);
  EXPECT_EQ(*GetOptionalString(j, "missing", "dflt"), "dflt");
  EXPECT_EQ(*GetOptionalString(j, "s", "dflt"), "x");
}

TEST(JsonFieldsTest, WrongTypesAndMissingFieldsAreInvalidArgumentNamingTheField) {
  Json j = Json::parse(R"({"s":"1","u":-1,"f":1.5,"big":18446744073709551615,"n":null,"o":[]})");
  for (absl::Status s :
       {GetUint(j, "s").status(), GetUint(j, "u").status(), GetUint(j, "f").status(),
        GetUint(j, "n").status(), GetString(j, "u").status(), GetBool(j, "s").status(),
        GetInt(j, "big").status(), GetInt(j, "f").status(), GetDouble(j, "s").status(),
        GetObject(j, "o").status(), GetArray(j, "s").status(),
        GetOptionalString(j, "u", "").status(), GetString(j, "missing").status()}) {
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_NE(s.message().find("field '"), absl::string_view::npos) << s;
  }
  EXPECT_FALSE(GetString(Json::array(), "s").ok());  // not an object: no fields
  EXPECT_FALSE(GetString(Json(), "s").ok());
}

}  // namespace
}  // namespace gfrep::transfer::internal

#include "server/common/status.h"

#include <gtest/gtest.h>

namespace ropeserve {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  RS_ASSIGN_OR_RETURN(int h, Half(x));
  RS_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(Status, OkAndErrorsCarryCodeAndMessage) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = NotFound("x.json");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: x.json");
  EXPECT_EQ(s.WithContext("dir").message(), "dir: x.json");
}

TEST(Status, AssignOrReturnPropagatesFirstError) {
  EXPECT_EQ(*Quarter(12), 3);
  auto r = Quarter(6);  // 6 -> 3 -> odd
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "odd: 3");
}

}  // namespace
}  // namespace ropeserve

#include "server/common/status.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "server/common/exception_message.h"

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

TEST(ExceptionMessage, CutsLibTorchsStackTraceAndLongMessages) {
  const std::runtime_error c10_style(
      "\"addmm_impl_cpu_\" not implemented for 'Half'\nException raised from operator() at LinearAlgebra.cpp:1308 "
      "(most "
      "recent call first):\nframe #0: c10::Error::Error(...)");
  EXPECT_EQ(ExceptionMessage(c10_style), "\"addmm_impl_cpu_\" not implemented for 'Half'");
  EXPECT_EQ(ExceptionMessage(std::runtime_error("plain\nsecond line")), "plain\nsecond line");
  const std::string m = ExceptionMessage(std::runtime_error(std::string(5000, 'x')));
  EXPECT_EQ(m.size(), 1003u);
  EXPECT_EQ(m.substr(1000), "...");
}

}  // namespace
}  // namespace ropeserve

// The safetensors reader on well-formed and damaged files: every damage
// yields a Status naming the file (and the tensor where there is one).
#include "server/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tests/checkpoint/test_checkpoints.h"

namespace ropeserve {
namespace {

using testing::ScratchDir;
using testing::WriteRawSafetensors;

std::string Floats(std::vector<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

TEST(Safetensors, RoundTripsWrittenTensors) {
  ScratchDir dir;
  std::vector<TensorToWrite> ts;
  ts.push_back({"a", DType::kF32, {2, 2}, {}});
  ts[0].bytes.resize(16);
  float vals[4] = {1, 2, 3, 4};
  std::memcpy(ts[0].bytes.data(), vals, 16);
  ts.push_back({"b", DType::kBF16, {3}, std::vector<std::uint8_t>(6, 0)});
  ASSERT_TRUE(WriteSafetensors(dir / "m.safetensors", ts, {{"format", "pt"}}).ok());

  auto f = SafetensorsFile::Open(dir / "m.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const TensorInfo* a = (*f)->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<std::int64_t>{2, 2}));
  float back[4];
  std::memcpy(back, (*f)->Data(*a), 16);
  EXPECT_EQ(back[3], 4.0f);
  EXPECT_EQ((*f)->Find("b")->dtype, DType::kBF16);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
}

struct BadCase {
  const char* name;
  std::string header;
  std::string data;
  ErrorCode code;
  const char* message_part;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class BadSafetensors : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadSafetensors, IsRejectedWithAClearError) {
  ScratchDir dir;
  const auto& c = GetParam();
  const std::string path = dir / "model.safetensors";
  WriteRawSafetensors(path, c.header, c.data);
  auto f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), c.code) << f.status().ToString();
  EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().ToString();
  EXPECT_NE(f.status().message().find(c.message_part), std::string::npos) << f.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(
    Damage, BadSafetensors,
    ::testing::Values(
        BadCase{"MalformedJson", R"({"w": {"dtype": "F32", )", "", ErrorCode::kInvalidArgument, "malformed JSON"},
        BadCase{"NotAnObject", "[1,2]", "", ErrorCode::kInvalidArgument, "not an object"},
        BadCase{"UnknownDtype", R"({"w":{"dtype":"F8_E9","shape":[1],"data_offsets":[0,1]}})", "x",
                ErrorCode::kUnimplemented, "unknown dtype 'F8_E9'"},
        BadCase{"OffsetsPastEnd", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", Floats({1, 2}),
                ErrorCode::kDataLoss, "tensor 'w'"},
        BadCase{"OffsetsReversed", R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", Floats({1, 2, 3}),
                ErrorCode::kInvalidArgument, "end before they begin"},
        BadCase{"SizeDisagreesWithShape", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", Floats({1, 2}),
                ErrorCode::kInvalidArgument, "need 12"},
        BadCase{
            "Overlapping",
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            Floats({1, 2, 3}), ErrorCode::kInvalidArgument, "overlapping"},
        BadCase{"NegativeDimension", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", Floats({1}),
                ErrorCode::kInvalidArgument, "negative"},
        BadCase{"MissingShape", R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", Floats({1}),
                ErrorCode::kInvalidArgument, "'shape'"},
        BadCase{"HugeShapeOverflow", R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})",
                Floats({1}), ErrorCode::kInvalidArgument, "more than 2^64"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Safetensors, FileShorterThanLengthPrefix) {
  ScratchDir dir;
  testing::WriteFile(dir / "m.safetensors", "abc");
  auto f = SafetensorsFile::Open(dir / "m.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), ErrorCode::kDataLoss);
  EXPECT_NE(f.status().message().find("too short"), std::string::npos);
}

TEST(Safetensors, HeaderLengthPastEndOfFile) {
  ScratchDir dir;
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(0xff);
  bytes[1] = static_cast<char>(0xff);
  testing::WriteFile(dir / "m.safetensors", bytes + "{}");
  auto f = SafetensorsFile::Open(dir / "m.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), ErrorCode::kDataLoss);
  EXPECT_NE(f.status().message().find("runs past the end of the file"), std::string::npos);
}

TEST(Safetensors, TruncatedDataSection) {
  ScratchDir dir;
  std::vector<TensorToWrite> ts{{"w", DType::kF32, {64}, std::vector<std::uint8_t>(256, 1)}};
  ASSERT_TRUE(WriteSafetensors(dir / "m.safetensors", ts).ok());
  std::string full = testing::ReadFile(dir / "m.safetensors");
  testing::WriteFile(dir / "m.safetensors", full.substr(0, full.size() - 100));
  auto f = SafetensorsFile::Open(dir / "m.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), ErrorCode::kDataLoss);
  EXPECT_NE(f.status().message().find("truncated"), std::string::npos) << f.status().ToString();
}

TEST(Safetensors, MissingFileIsNotFound) {
  auto f = SafetensorsFile::Open("/nonexistent/model.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), ErrorCode::kNotFound);
}

TEST(DType, Bf16AndF16ConversionsRoundToNearestEven) {
  EXPECT_EQ(FloatToBF16(1.0f), 0x3f80);
  EXPECT_EQ(BF16ToFloat(FloatToBF16(3.140625f)), 3.140625f);
  EXPECT_EQ(FloatToBF16(1.00390625f), 0x3f80);  // exactly halfway: rounds to even
  EXPECT_EQ(FloatToF16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToF16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToF16(1e6f), 0x7c00);             // overflow -> inf
  EXPECT_EQ(FloatToF16(5.96046448e-08f), 0x0001);  // smallest subnormal
}

}  // namespace
}  // namespace ropeserve

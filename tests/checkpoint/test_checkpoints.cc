#include "tests/checkpoint/test_checkpoints.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ropeserve::testing {

MakeModelOptions TinyOptions(const std::string& arch) {
  MakeModelOptions o;
  o.preset = "tiny";
  o.arch = arch;
  o.vocab_size = 300;
  o.seed = 7;
  return o;
}

void MakeTinyCheckpoint(const std::string& dir, const MakeModelOptions& options) {
  Status s = MakeModel(dir, options);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

nlohmann::json ReadJson(const std::string& path) { return nlohmann::json::parse(ReadFile(path)); }

void WriteJson(const std::string& path, const nlohmann::json& j) { WriteFile(path, j.dump(2)); }

void WriteRawSafetensors(const std::string& path, const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  WriteFile(path, out + header + data);
}

std::vector<TensorToWrite> ReadAll(const std::string& path) {
  auto f = SafetensorsFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  std::vector<TensorToWrite> out;
  if (!f.ok()) return out;
  for (const auto& [name, info] : (*f)->tensors()) {
    TensorToWrite t{name, info.dtype, info.shape, std::vector<std::uint8_t>(info.end - info.begin)};
    std::memcpy(t.bytes.data(), (*f)->Data(info), t.bytes.size());
    out.push_back(std::move(t));
  }
  return out;
}

void Rewrite(const std::string& path, const std::function<void(std::vector<TensorToWrite>&)>& edit) {
  auto ts = ReadAll(path);
  edit(ts);
  ASSERT_TRUE(WriteSafetensors(path, ts).ok());
}

// Appended piece by piece: GCC 12's -Warray-bounds misfires on the
// literal + "/" + string expression (a known false positive).
std::string TestData(const std::string& relative) {
  std::string path = ROPESERVE_TEST_DATA;
  path += '/';
  path += relative;
  return path;
}

}  // namespace ropeserve::testing

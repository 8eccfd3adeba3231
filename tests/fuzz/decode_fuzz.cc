// libFuzzer target: arbitrary id sequences through decode and the
// incremental decoder. Pieces must be valid UTF-8 and concatenate to the
// full decode; unknown ids must be errors, not crashes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "server/tokenizer/tokenizer.h"
#include "server/tokenizer/unicode.h"
#include "tests/fuzz/fuzz_tokenizers.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
  if (size < 1) return 0;
  auto& ts = FuzzTokenizers();
  const auto& t = ts[data[0] % ts.size()];
  const bool skip = data[0] & 0x80;
  std::vector<ropeserve::TokenId> ids;
  bool known = true;
  for (size_t i = 1; i + 3 <= size; i += 3) {
    // Mostly in-vocabulary ids, sometimes past the end or negative.
    std::uint32_t raw = (std::uint32_t{data[i]} << 16) | (std::uint32_t{data[i + 1]} << 8) | data[i + 2];
    if (!(data[i] & 0x80)) raw %= static_cast<std::uint32_t>(t->VocabSize());
    auto id = static_cast<ropeserve::TokenId>(raw);
    if ((data[i] & 0xC0) == 0xC0) id = -id - 1;
    known &= t->IdToToken(id) != nullptr;
    ids.push_back(id);
  }
  auto full = t->Decode(ids, skip);
  if (full.ok() != known) std::abort();
  if (!full.ok()) return 0;
  ropeserve::tok::IncrementalDecoder dec(t, skip);
  std::string joined;
  for (ropeserve::TokenId id : ids) {
    auto p = dec.Push(id);
    if (!p.ok() || ropeserve::tok::FindInvalidUtf8(*p) != std::string::npos) std::abort();
    joined += *p;
  }
  auto rest = dec.Finish();
  if (!rest.ok()) std::abort();
  joined += *rest;
  if (joined != *full) std::abort();
  return 0;
}

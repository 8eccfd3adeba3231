// libFuzzer target: arbitrary bytes through encode (single and pair with
// truncation) of every test tokenizer. Invalid UTF-8 must come back as an
// error, everything else must encode, and decoding must not fail.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "server/tokenizer/tokenizer.h"
#include "server/tokenizer/unicode.h"
#include "tests/fuzz/fuzz_tokenizers.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
  if (size == 0) return 0;
  auto& ts = FuzzTokenizers();
  const auto& t = ts[data[0] % ts.size()];
  const std::string s(reinterpret_cast<const char*>(data + 1), size - 1);
  const bool valid = ropeserve::tok::FindInvalidUtf8(s) == std::string::npos;
  auto e = t->Encode(s, (data[0] & 0x80) != 0);
  if (e.ok() != valid) std::abort();
  if (!e.ok()) return 0;
  for (const auto& o : e->offsets) {
    if (o.start > o.end || o.end > ropeserve::tok::CountCodePoints(s)) std::abort();
  }
  if (!t->Decode(e->ids, (data[0] & 0x40) != 0).ok()) std::abort();
  // Pairs: split the input in two, truncate with a stride.
  const size_t cut = s.size() / 3;
  if (ropeserve::tok::FindInvalidUtf8(s.substr(0, cut)) == std::string::npos &&
      ropeserve::tok::FindInvalidUtf8(s.substr(cut)) == std::string::npos) {
    ropeserve::tok::Truncation tr;
    tr.max_length = 8 + data[0] % 24;
    tr.stride = data[0] % 5;
    tr.strategy = static_cast<ropeserve::tok::TruncationStrategy>(data[0] % 3);
    (void)t->EncodePair(s.substr(0, cut), s.substr(cut), true, tr);
  }
  return 0;
}

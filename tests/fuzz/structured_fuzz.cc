// libFuzzer target: arbitrary bytes as a structured-output constraint (a
// regular expression or a JSON Schema, as clients send them) through the
// compiler (server/structured/) and a match of the rest of the input.
// Errors ("not supported", "too complex") are fine; crashes, hangs,
// unbounded memory and leaks are not.
#include <cstdint>
#include <string>

#include "server/structured/automaton.h"
#include "server/structured/constraint.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
  using namespace ropeserve::structured;
  if (size < 2) return 0;
  const std::string in(reinterpret_cast<const char*>(data + 1), size - 1);
  // The constraint, then (after a NUL) a text to match against it.
  const std::size_t cut = in.find('\0');
  const std::string spec = in.substr(0, cut);
  const std::string text = cut == std::string::npos ? "" : in.substr(cut + 1);
  Constraint c;
  switch (data[0] % 3) {
    case 0:
      c = {Constraint::Kind::kRegex, spec, {}, "guided_regex"};
      break;
    case 1:
      c = {Constraint::Kind::kJsonSchema, spec, {}, "guided_json"};
      break;
    default:
      c = {Constraint::Kind::kChoice, "", {spec, text.empty() ? "x" : text}, "guided_choice"};
      break;
  }
  auto e = ConstraintExpr(c);
  if (!e.ok()) return 0;
  // Smaller limits than the server's keep each run short; the code paths
  // are the same.
  auto d = Dfa::Compile(*e, AutomatonLimits{20000, 2000});
  if (!d.ok()) return 0;
  (void)d->Matches(text);
  (void)d->DistancesToAccept(ByteSet().set());
  return 0;
}

# Writes OUT: a C++ source defining `const std::string& FUNC()` (in
# namespace NS) that returns the text of IN. Run with cmake -P at build time.
file(READ "${IN}" content)
string(FIND "${content}" ")embedded\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )embedded\"")
endif()
file(WRITE "${OUT}" "// Generated from ${IN} by cmake/embed_text.cmake; do not edit.\n#include <string>\nnamespace ${NS} {\nconst std::string& ${FUNC}() {\n  static const std::string text = R\"embedded(${content})embedded\";\n  return text;\n}\n}  // namespace ${NS}\n")

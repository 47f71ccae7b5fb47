# Script mode, run by kvtier_embed_file (embed.cmake): writes OUTPUT, a C++ source defining
# `std::string_view NAMESPACE::FUNCTION()` that returns the bytes of INPUT.
file(READ "${INPUT}" content)
set(delimiter "kvtier_embed")
string(FIND "${content}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )${delimiter}\"")
endif()
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by cmake/embed_file.cmake; do not edit.\n"
  "#include <string_view>\n\nnamespace ${NAMESPACE} {\n\n"
  "std::string_view ${FUNCTION}() {\n"
  "  static constexpr char kText[] = R\"${delimiter}(${content})${delimiter}\";\n"
  "  return {kText, sizeof(kText) - 1};\n}\n\n}  // namespace ${NAMESPACE}\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")

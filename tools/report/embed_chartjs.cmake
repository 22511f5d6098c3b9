# cmake -DINPUT=chart.min.js -DOUTPUT=chartjs_bundle.cpp -P embed_chartjs.cmake
# Writes a .cpp that holds INPUT's bytes as an array, behind leap::report::chartjs_source().
if(NOT EXISTS "${INPUT}")
  message(FATAL_ERROR "embed_chartjs: ${INPUT} does not exist (install libjs-chart.js)")
endif()
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
if(hex_length EQUAL 0)
  message(FATAL_ERROR "embed_chartjs: ${INPUT} is empty")
endif()
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
# A line break every 16 bytes keeps the generated file readable by editors and diff tools (CMake's
# regular expressions have no {n} repetition, so the pattern is spelled out).
string(REPEAT "0x[0-9a-f][0-9a-f]," 16 sixteen)
string(REGEX REPLACE "(${sixteen})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUTPUT}.tmp"
"// Generated at build time from ${INPUT} by tools/report/embed_chartjs.cmake. Do not edit.
#include \"tools/report/chartjs.hpp\"

namespace leap::report {
namespace {
const unsigned char chartjs_bytes[] = {
${bytes}
};
}  // namespace

std::string_view chartjs_source() {
  return {reinterpret_cast<const char*>(chartjs_bytes), sizeof chartjs_bytes};
}

}  // namespace leap::report
")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")

// Chart.js (Debian's libjs-chart.js, the UMD bundle), embedded into the binary at build time by
// tools/report/embed_chartjs.cmake, so that `leap report` writes a self-contained page without
// reading any file at run time.
#pragma once

#include <string_view>

namespace leap::report {

// The bundle's text as installed (license banner included). Thread-safe; never empty.
[[nodiscard]] std::string_view chartjs_source();

}  // namespace leap::report

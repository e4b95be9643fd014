// Writing a whole text file (a chart, a trace, a CSV) for the library's writers.
#pragma once

#include <string>
#include <string_view>

namespace hg {

// Writes `text` to the file at `path`, replacing what it held. Errors are hg::Error naming the
// caller `who` and the path: "<who>: cannot open "<path>" for writing (<reason>)" and "<who>:
// writing "<path>" failed".
void write_text_file(const std::string& path, std::string_view text, std::string_view who);

}  // namespace hg

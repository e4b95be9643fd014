// write_text_file (text_file.h).
#include "halfgrad/core/text_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"

namespace hg {

void write_text_file(const std::string& path, std::string_view text, std::string_view who) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  HG_CHECK(file.is_open(), "{}: cannot open \"{}\" for writing ({})", who, path,
           std::strerror(errno));
  file.write(text.data(), std::streamsize(text.size()));
  file.close();
  HG_CHECK(!file.fail(), "{}: writing \"{}\" failed", who, path);
}

}  // namespace hg

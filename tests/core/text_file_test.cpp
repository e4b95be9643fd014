// write_text_file (core/text_file.h): the text written whole, a file replaced, and errors naming
// the caller and the path.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "halfgrad/core/text_file.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

namespace {

std::string read_back(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("write_text_file writes the text whole and replaces the file") {
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / "halfgrad_text_file_test";
  std::filesystem::create_directories(folder);
  const std::string path = (folder / "out.csv").string();
  std::string text = "a,b\n";
  text.push_back('\0');  // bytes as given, a NUL and no newline translation included
  text += "1,2\r\n";
  write_text_file(path, text, "test");
  CHECK(read_back(path) == text);
  write_text_file(path, "short", "test");
  CHECK(read_back(path) == "short");
  write_text_file(path, "", "test");
  CHECK(read_back(path).empty());
  std::filesystem::remove_all(folder);
}

TEST_CASE("write_text_file names the caller and the path when it cannot write") {
  const std::string missing = "/nonexistent_halfgrad_folder/out.svg";
  CHECK_THROWS_WITH(write_text_file(missing, "x", "SvgChart::write"),
                    Contains("SvgChart::write: cannot open \"" + missing + "\" for writing"));
  // A folder is not a file.
  const std::string folder = std::filesystem::temp_directory_path().string();
  CHECK_THROWS_WITH(write_text_file(folder, "x", "Profile::export_chrome_trace"),
                    Contains("Profile::export_chrome_trace: cannot open"));
}

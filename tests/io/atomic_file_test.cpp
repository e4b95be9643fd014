// io::AtomicFileWriter: temporaries with unique names, and the cleanup of those whose writer
// died (a SIGKILL mid-save, a restart with the same pid) that spares live writers.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"
#include "halfgrad/io/atomic_file.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;

namespace {

std::set<std::string> entries(const TempFolder& folder) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(folder.path)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

size_t temporaries_of(const TempFolder& folder, const std::string& basename) {
  size_t count = 0;
  for (const std::string& name : entries(folder)) count += name.starts_with(basename + ".tmp-");
  return count;
}

}  // namespace

TEST_CASE("a writer killed mid-save leaves a loadable file and the next save no temporaries",
          "[io][atomic]") {
  TempFolder folder;
  const std::string path = folder.file("ckpt.safetensors");
  // Two 4 MB versions, made before any fork: the child only writes bytes.
  const TensorMap versions[2] = {{{"w", full({1 << 20}, 1.0)}}, {{"w", full({1 << 20}, 2.0)}}};
  save(path, versions[0]);
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> delay_ms(5, 120);
  const auto start = std::chrono::steady_clock::now();
  size_t most_temporaries = 0;
  for (int round = 0;
       round < 12 && std::chrono::steady_clock::now() - start < std::chrono::seconds(5); ++round) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      try {
        for (size_t i = 0;; ++i) save(path, versions[i % 2]);
      } catch (...) {
      }
      ::_exit(1);  // a save failed
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    ::kill(child, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    INFO("round " << round);
    CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));  // still saving when killed
    const Tensor loaded = load(path).at("w");
    CHECK(
        (bit_identical(loaded, versions[0].at("w")) || bit_identical(loaded, versions[1].at("w"))));
    most_temporaries = std::max(most_temporaries, temporaries_of(folder, "ckpt.safetensors"));
  }
  INFO("temporaries left by a killed writer, at most: " << most_temporaries);
  save(path, versions[1]);
  CHECK(temporaries_of(folder, "ckpt.safetensors") == 0);
  CHECK(entries(folder) == std::set<std::string>{"ckpt.safetensors"});
  CHECK(bit_identical(load(path).at("w"), versions[1].at("w")));
}

TEST_CASE("a restarted process whose pid named a dead run's temporaries saves normally",
          "[io][atomic]") {
  TempFolder folder;
  const std::string path = folder.file("ckpt.safetensors");
  // A killed run with this pid (every run in a fresh container is pid 1) left the names
  // "<path>.tmp-<pid>-<n>" earlier versions chose, for the next counter values, and one of
  // today's names whose writer is gone.
  for (int n = 0; n < 256; ++n) write_file(fmt::format("{}.tmp-{}-{}", path, ::getpid(), n), "x");
  write_file(path + ".tmp-0123456789abcdef", "stale");
  // What the cleanup must leave alone: another checkpoint's temporary, a checkpoint whose
  // name extends this one's, and a folder and a link named like temporaries.
  write_file(folder.file("other.safetensors.tmp-1-2"), "other");
  write_file(path + ".tmp-best", "best");
  std::filesystem::create_directory(path + ".tmp-fedcba9876543210");
  std::filesystem::create_symlink("ckpt.safetensors.tmp-best", path + ".tmp-7-7");

  const TensorMap weights = {{"w", full({16}, 3.0)}};
  save(path, weights);
  CHECK(bit_identical(load(path).at("w"), weights.at("w")));
  CHECK(entries(folder) == std::set<std::string>{"ckpt.safetensors", "other.safetensors.tmp-1-2",
                                                 "ckpt.safetensors.tmp-best",
                                                 "ckpt.safetensors.tmp-fedcba9876543210",
                                                 "ckpt.safetensors.tmp-7-7"});
  CHECK(read_file(path + ".tmp-best") == "best");
}

TEST_CASE("each writer's temporary is <path>.tmp- and 16 new hex digits", "[io][atomic]") {
  TempFolder folder;
  const std::string path = folder.file("ckpt.safetensors");
  io::AtomicFileWriter first(path), second(path);
  for (const io::AtomicFileWriter* writer : {&first, &second}) {
    const std::string& name = writer->temporary_path();
    REQUIRE(name.size() == path.size() + 5 + 16);
    CHECK(name.starts_with(path + ".tmp-"));
    CHECK(name.find_first_not_of("0123456789abcdef", path.size() + 5) == std::string::npos);
  }
  CHECK(first.temporary_path() != second.temporary_path());
}

TEST_CASE("a live writer's temporary survives another writer's cleanup", "[io][atomic]") {
  TempFolder folder;
  const std::string path = folder.file("ckpt.safetensors");
  SECTION("two writers in one process") {
    io::AtomicFileWriter first(path);
    first.write("first", 5);
    {
      io::AtomicFileWriter second(path);
      second.write("second", 6);
      second.commit();
    }
    CHECK(read_file(path) == "second");
    CHECK(std::filesystem::exists(first.temporary_path()));
    first.write(" again", 6);
    first.commit();
    CHECK(read_file(path) == "first again");
    CHECK(entries(folder) == std::set<std::string>{"ckpt.safetensors"});
  }
  SECTION("a writer in another process") {
    int to_parent[2], to_child[2];
    REQUIRE(::pipe(to_parent) == 0);
    REQUIRE(::pipe(to_child) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      int exit_code = 1;
      try {
        io::AtomicFileWriter writer(path);
        writer.write("child", 5);
        const std::string name = writer.temporary_path() + "\n";
        char go = 0;
        if (::write(to_parent[1], name.data(), name.size()) == ssize_t(name.size()) &&
            ::read(to_child[0], &go, 1) == 1) {
          writer.commit();
          exit_code = 0;
        }
      } catch (...) {
      }
      ::_exit(exit_code);
    }
    ::close(to_parent[1]);
    ::close(to_child[0]);
    std::string child_temporary;
    char c = 0;
    while (::read(to_parent[0], &c, 1) == 1 && c != '\n') child_temporary += c;
    REQUIRE(!child_temporary.empty());
    save(path, {{"w", full({4}, 1.0)}});
    CHECK(std::filesystem::exists(child_temporary));
    REQUIRE(::write(to_child[1], "g", 1) == 1);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
    CHECK(read_file(path) == "child");
    ::close(to_parent[0]);
    ::close(to_child[1]);
  }
}

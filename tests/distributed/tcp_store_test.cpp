// hg::distributed::TCPStore under mpirun -np 2: rank 0's master store, its port sent to the
// other rank by the MPI group's broadcast; set and get across ranks, a get that waits for the
// other rank, add as a shared counter, check and wait, a get that times out, bad input. The
// hidden [torchrun] case runs without mpirun, as torchrun starts a job (its own ctest entry,
// tests/distributed/torchrun_case.cmake).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "halfgrad/core/factory.h"
#include "halfgrad/distributed/process_group.h"
#include "halfgrad/distributed/tcp_store.h"

#include "test_group.h"

using namespace hg;
using namespace hg::distributed;
using namespace std::chrono_literals;
using Catch::Contains;
using Bytes = std::vector<uint8_t>;

namespace {

using distributed_test::group;

// Every rank's store, rank 0's the master on a port the system picked.
TCPStore& store() {
  static std::unique_ptr<TCPStore> made = [] {
    ProcessGroup& pg = group();
    std::unique_ptr<TCPStore> made_here;
    if (pg.rank() == 0) {
      made_here = std::make_unique<TCPStore>("127.0.0.1", 0, pg.world_size(), true, 20s);
    }
    Tensor port =
        tensor(std::vector<double>{pg.rank() == 0 ? double(made_here->port()) : 0.0}, kInt64);
    pg.broadcast(port, 0)->wait();
    if (pg.rank() != 0) {
      made_here = std::make_unique<TCPStore>("127.0.0.1", int(port.data_ptr<int64_t>()[0]),
                                             pg.world_size(), false, 20s);
    }
    return made_here;
  }();
  return *made;
}

// Every rank leaves a case together, so no rank's next case (or exit) outruns another's.
void in_step() { group().barrier()->wait(); }

// `n` bytes from a seed: every byte value, zeros included, travels.
Bytes bytes_of(uint64_t seed, size_t n) {
  std::mt19937_64 generator(seed);
  Bytes bytes(n);
  for (uint8_t& byte : bytes) byte = uint8_t(generator());
  return bytes;
}

Bytes text(std::string_view value) { return Bytes(value.begin(), value.end()); }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("TCPStore set on one rank is what get returns on the other", "[distributed]") {
  ProcessGroup& pg = group();
  TCPStore& kv = store();
  CHECK(kv.is_master() == (pg.rank() == 0));
  CHECK(kv.port() > 0);
  CHECK(kv.world_size() == pg.world_size());
  kv.wait_for_workers();  // every rank's store is made
  kv.set("from/" + std::to_string(pg.rank()), bytes_of(uint64_t(pg.rank()), 4096));
  kv.set("empty/" + std::to_string(pg.rank()), Bytes{});
  for (int r = 0; r < pg.world_size(); ++r) {
    CHECK(kv.get("from/" + std::to_string(r)) == bytes_of(uint64_t(r), 4096));
    CHECK(kv.get("empty/" + std::to_string(r)).empty());
  }
  in_step();
  // A later set replaces the value.
  if (pg.rank() == 0) kv.set("replaced", std::string_view("first"));
  in_step();
  CHECK(kv.get("replaced") == text("first"));
  in_step();
  if (pg.rank() == 1) kv.set("replaced", std::string_view("second"));
  in_step();
  CHECK(kv.get("replaced") == text("second"));
  in_step();
}

TEST_CASE("TCPStore get blocks until the other rank sets the key", "[distributed]") {
  ProcessGroup& pg = group();
  TCPStore& kv = store();
  if (pg.rank() == 1) {
    const auto start = std::chrono::steady_clock::now();
    CHECK_FALSE(kv.check({"late"}));  // rank 0 sets it only after "asked"
    kv.set("asked", std::string_view("yes"));
    const Bytes got = kv.get("late");
    CHECK(got == text("at last"));
    CHECK(seconds_since(start) >= 0.2);
  } else {
    kv.wait({"asked"});
    std::this_thread::sleep_for(200ms);
    kv.set("late", std::string_view("at last"));
  }
  in_step();
}

TEST_CASE("TCPStore add counts from every rank", "[distributed]") {
  ProcessGroup& pg = group();
  TCPStore& kv = store();
  const int64_t delta = pg.rank() + 1;
  int64_t previous = 0;
  bool rising = true;
  for (int i = 0; i < 100; ++i) {
    const int64_t now = kv.add("counter", delta);
    rising = rising && now >= previous + delta;
    previous = now;
  }
  CHECK(rising);
  in_step();
  // 100 * (1 + 2 + ... + world): the adds of every rank, none lost.
  const int64_t world = pg.world_size();
  CHECK(kv.add("counter", 0) == 100 * world * (world + 1) / 2);
  CHECK(kv.get("counter") == text(std::to_string(100 * world * (world + 1) / 2)));
  in_step();
  if (pg.rank() == 0) CHECK(kv.add("negative", -7) == -7);
  in_step();
  if (pg.rank() == 1) CHECK(kv.add("negative", 3) == -4);
  // A key that does not hold a decimal integer is an error, and keeps its value.
  const std::string mine = "not a number/" + std::to_string(pg.rank());
  kv.set(mine, std::string_view("12x"));
  CHECK_THROWS_WITH(kv.add(mine, 1), Contains("expected key '" + mine + "' to hold a decimal"));
  CHECK(kv.get(mine) == text("12x"));
  kv.set(mine, std::string_view(std::to_string(INT64_MAX)));
  CHECK_THROWS_WITH(kv.add(mine, 1), Contains("to fit int64"));
  CHECK(kv.add(mine, -1) == INT64_MAX - 1);
  in_step();
}

TEST_CASE("TCPStore check and wait see the keys of every rank", "[distributed]") {
  ProcessGroup& pg = group();
  TCPStore& kv = store();
  const std::vector<std::string> keys = {"both/0", "both/1"};
  CHECK(kv.check({}));
  kv.wait({});
  CHECK_FALSE(kv.check({"nobody sets this"}));
  if (pg.rank() == 0) {
    kv.set("both/0", std::string_view("a"));
    kv.wait({"checked"});  // rank 1 saw half the keys before the other half comes
    kv.set("both/1", std::string_view("b"));
  } else {
    kv.wait({"both/0"});
    CHECK_FALSE(kv.check(keys));
    kv.set("checked", std::string_view(""));
    kv.wait(keys);
  }
  CHECK(kv.check(keys));
  in_step();
}

TEST_CASE("TCPStore get of a key nobody sets times out naming the key", "[distributed]") {
  ProcessGroup& pg = group();
  TCPStore& kv = store();
  TCPStore quick("127.0.0.1", kv.port(), pg.world_size(), false, 300ms);
  const std::string address = "127.0.0.1:" + std::to_string(kv.port());
  auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(
      quick.get("nobody sets this"),
      Contains("key 'nobody sets this' was not set within 300 ms") && Contains(address));
  double waited = seconds_since(start);
  CHECK(waited >= 0.29);
  CHECK(waited < 10.0);
  start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(quick.wait({"counter", "nor this"}),
                    Contains("keys 'counter', 'nor this' were not all set within 300 ms"));
  CHECK(seconds_since(start) >= 0.29);
  // The store goes on working after a timeout (its next request connects afresh).
  const std::string key = "after a timeout/" + std::to_string(pg.rank());
  quick.set(key, std::string_view("fine"));
  CHECK(kv.get(key) == text("fine"));
  CHECK(quick.add("counter", 0) == kv.add("counter", 0));
  in_step();
}

TEST_CASE("TCPStore bad input and a closed server are errors", "[distributed]") {
  CHECK_THROWS_WITH(TCPStore("", 0, 1, true, 1s), Contains("expected a host name or address"));
  CHECK_THROWS_WITH(TCPStore("127.0.0.1", 70000, 1, true, 1s),
                    Contains("expected a port in [0, 65535]") && Contains("got 70000"));
  CHECK_THROWS_WITH(TCPStore("127.0.0.1", -1, 1, true, 1s), Contains("got -1"));
  CHECK_THROWS_WITH(TCPStore("127.0.0.1", 0, 1, false, 1s),
                    Contains("expected a port in [1, 65535], got 0"));
  CHECK_THROWS_WITH(TCPStore("127.0.0.1", 0, 0, true, 1s),
                    Contains("expected a world size of at least 1, got 0"));
  CHECK_THROWS_WITH(TCPStore("127.0.0.1", 0, 1, true, 0ms),
                    Contains("expected a positive timeout, got 0 ms"));

  // Each rank's own master; its clients find it gone once it is.
  auto master = std::make_unique<TCPStore>("127.0.0.1", 0, 2, true, 2s);
  const int port = master->port();
  TCPStore client("127.0.0.1", port, 2, false, 2s);
  client.set("there", std::string_view("yes"));
  CHECK(master->get("there") == text("yes"));
  master.reset();
  CHECK_THROWS_WITH(client.get("there"), Contains("the master store is gone"));
  CHECK_THROWS_WITH(TCPStore("127.0.0.1", port, 2, false, 200ms),
                    Contains("expected to reach the store server at 127.0.0.1:" +
                             std::to_string(port) + " within 200 ms"));
  // The port is taken while a master listens on it.
  TCPStore first("127.0.0.1", 0, 1, true, 2s);
  CHECK_THROWS_WITH(TCPStore("127.0.0.1", first.port(), 1, true, 2s),
                    Contains("expected to listen on port " + std::to_string(first.port())));

  LaunchEnvironment env;
  env.launcher = "torchrun";
  env.world_size = 2;
  env.master_port = 29500;
  CHECK_THROWS_WITH(make_launcher_store(env, 1s), Contains("expected MASTER_ADDR"));
  env.master_addr = "127.0.0.1";
  env.master_port = 0;
  CHECK_THROWS_WITH(make_launcher_store(env, 1s),
                    Contains("expected MASTER_PORT in [1, 65535], got it unset or 0"));
  in_step();
}

// Run by tests/distributed/torchrun_case.cmake as two processes with torchrun's environment
// and no mpirun: the rendezvous the NCCL backend makes under torchrun, without a GPU.
TEST_CASE("TCPStore rendezvous as torchrun starts a job", "[.torchrun]") {
  const LaunchEnvironment env = read_launch_environment();
  REQUIRE(env.launcher == "torchrun");
  REQUIRE(env.world_size >= 2);
  const auto kv = make_launcher_store(env, 30s);
  CHECK(kv->is_master() == (env.rank == 0));
  CHECK(kv->port() == env.master_port);
  kv->wait_for_workers();
  // Rank 0's id to every rank, as the NCCL unique id travels.
  if (env.rank == 0) kv->set("unique id", bytes_of(2024, 128));
  CHECK(kv->get("unique id") == bytes_of(2024, 128));
  kv->add("arrived", env.rank + 1);
  kv->set("done/" + std::to_string(env.rank), std::string_view("done"));
  // The master's server lives until every rank is done with it.
  if (env.rank == 0) {
    std::vector<std::string> done;
    for (int r = 0; r < env.world_size; ++r) done.push_back("done/" + std::to_string(r));
    kv->wait(done);
    CHECK(kv->add("arrived", 0) == int64_t(env.world_size) * (env.world_size + 1) / 2);
  }
}

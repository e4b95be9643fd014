// hg::distributed::TCPStore (torch's c10d TCPStore): a key-value store one process serves over
// TCP and every rank of a job reaches, for the rendezvous a launcher without MPI needs.
//
//   TCPStore store("127.0.0.1", 29500, /*world_size=*/2, /*is_master=*/rank == 0);
//   if (rank == 0) store.set("id", bytes);
//   std::vector<uint8_t> id = store.get("id");   // blocks until rank 0 set it
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "halfgrad/distributed/process_group.h"

namespace hg::distributed {

class TCPStore {
 public:
  // The master (one per job) listens on `port` (0: an ephemeral port, port() says which) and
  // serves every store of the job from a thread of its own; every store, the master's too, is a
  // client of that server at host:port, retrying the connection until `timeout`. `timeout`
  // also bounds every get() and wait(). Throws on an empty host, a port outside [0, 65535]
  // (0 only for the master), a world size below 1, a timeout that is not positive, and when
  // the server cannot be reached in time.
  TCPStore(std::string host, int port, int world_size, bool is_master,
           std::chrono::milliseconds timeout = std::chrono::minutes(5));
  ~TCPStore();
  TCPStore(const TCPStore&) = delete;
  TCPStore& operator=(const TCPStore&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  int world_size() const { return world_size_; }
  bool is_master() const { return server_ != nullptr; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  void set(std::string_view key, const std::vector<uint8_t>& value);
  void set(std::string_view key, std::string_view value);
  // The key's value; blocks until some store set it, and throws once the timeout has passed.
  std::vector<uint8_t> get(std::string_view key);
  // Adds `delta` to the integer the key holds (0 when unset) and returns the sum. The value is
  // kept as decimal text, as torch keeps it: get() of a counter at 3 gives "3".
  int64_t add(std::string_view key, int64_t delta);
  // Whether every key is set, without waiting.
  bool check(const std::vector<std::string>& keys);
  // Blocks until every key is set; throws once the timeout has passed.
  void wait(const std::vector<std::string>& keys);
  // Blocks until world_size stores (the master's included) have been made; throws once the
  // timeout has passed.
  void wait_for_workers();

 private:
  class Server;
  // One request and its reply's payload (NOTE [TCP store]); throws the server's error, a
  // timeout naming `what` (the keys a get or wait waits for), or a lost connection.
  std::vector<uint8_t> request(std::string_view operation, std::string_view what,
                               const std::vector<uint8_t>& message);
  void connect_to_server();
  std::string address() const;

  std::string host_;
  int port_;
  int world_size_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Server> server_;  // the master's; null on the other ranks
  std::mutex socket_mutex_;         // one request at a time on the socket
  int socket_ = -1;                 // -1 after a timed-out request: the next one reconnects
};

// The store of a job torchrun started: MASTER_ADDR:MASTER_PORT, rank 0 its master. Throws,
// naming the variable, when the environment lacks MASTER_ADDR or MASTER_PORT.
std::unique_ptr<TCPStore> make_launcher_store(const LaunchEnvironment& env,
                                              std::chrono::milliseconds timeout);

}  // namespace hg::distributed

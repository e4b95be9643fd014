// TCPStore: the master's server thread (one poll() loop over every connection) and the client
// side every store uses, over a small length-prefixed binary protocol on POSIX sockets.
#include "halfgrad/distributed/tcp_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"

namespace hg::distributed {

// NOTE [TCP store] The master store runs a server on a thread of its own; every store of the
// job, the master's included, holds one blocking client connection to it and sends one
// request at a time (a mutex per store), waiting for the reply with poll() up to the store's
// timeout. The server is one poll() loop over the listening socket, a wake-up pipe (the
// destructor writes a byte, then joins the thread) and every client connection, all
// non-blocking: it reads what a client sent into that client's buffer, runs each complete
// request in order, and queues the reply in the client's output buffer, sent as the socket
// accepts it. No thread per client, no lock on the data: only the server thread touches it.
//
// The protocol, every integer little-endian:
//   request  u8 command, u32 key count, keys (each u32 length + bytes), then
//            set: u64 length + value bytes; add: i64 delta; get, check, wait: nothing
//   reply    u8 status (0 ok, 1 error), u64 length + payload: get: the value; add: the sum
//            (i64); check: one byte 0 or 1; set, wait: empty; error: the message
// A get or a wait whose keys are not all set parks its client: the server answers when a set
// or an add completes the keys, and reads nothing more from that client until then. When
// the client's timeout passes first, it closes its connection (the server drops the parked
// request with it) and throws; its next request connects afresh, so a late reply can never
// be read as the answer to another request. Malformed input (an unknown command, a length
// past the limits) closes that connection and leaves the others and the data untouched.

namespace {

enum class Command : uint8_t { Set = 1, Get = 2, Add = 3, Check = 4, Wait = 5 };
constexpr uint8_t kOk = 0;
constexpr uint8_t kFailed = 1;
constexpr uint32_t kMaxKeys = 1u << 16;
constexpr uint32_t kMaxKeyBytes = 1u << 16;
constexpr uint64_t kMaxValueBytes = uint64_t(1) << 30;
// The store's own keys, apart from any a user would pick.
constexpr std::string_view kJoinedKey = "hg::distributed::TCPStore/joined";
constexpr std::string_view kAllJoinedKey = "hg::distributed::TCPStore/all joined";

using Bytes = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;

void put_uint(Bytes& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(uint8_t(value >> (8 * i)));
}

void put_key(Bytes& out, std::string_view key) {
  put_uint(out, key.size(), 4);
  out.insert(out.end(), key.begin(), key.end());
}

uint64_t get_uint(const uint8_t* data, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= uint64_t(data[i]) << (8 * i);
  return value;
}

Bytes request_header(Command command, const std::vector<std::string_view>& keys) {
  Bytes message;
  message.push_back(uint8_t(command));
  put_uint(message, keys.size(), 4);
  for (std::string_view key : keys) put_key(message, key);
  return message;
}

std::string quoted_keys(const std::vector<std::string>& keys) {
  std::string text;
  for (const std::string& key : keys) text += (text.empty() ? "'" : ", '") + key + "'";
  return text;
}

std::string errno_text() { return std::strerror(errno); }

void close_socket(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

void set_nonblocking(int fd, bool on) {
  const int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK);
}

void set_no_delay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int milliseconds_until(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return int(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

}  // namespace

class TCPStore::Server {
 public:
  // Listens on every interface (IPv6 with IPv4 mapped where the system has IPv6) at `port`.
  explicit Server(int port) {
    listen_fd_ = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ >= 0) {
      const int zero = 0, one = 1;
      setsockopt(listen_fd_, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
      setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      sockaddr_in6 address{};
      address.sin6_family = AF_INET6;
      address.sin6_addr = in6addr_any;
      address.sin6_port = htons(uint16_t(port));
      if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
        close_socket(listen_fd_);
      }
    }
    if (listen_fd_ < 0) {  // no IPv6: IPv4 alone
      listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      HG_CHECK(listen_fd_ >= 0, "TCPStore: the master expected a socket to listen on, got: {}",
               errno_text());
      const int one = 1;
      setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_addr.s_addr = htonl(INADDR_ANY);
      address.sin_port = htons(uint16_t(port));
      if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
        const std::string reason = errno_text();
        close_socket(listen_fd_);
        HG_ERROR("TCPStore: the master expected to listen on port {}, got: {}", port, reason);
      }
    }
    if (listen(listen_fd_, 512) != 0 || pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
      const std::string reason = errno_text();
      close_socket(listen_fd_);
      HG_ERROR("TCPStore: the master expected to listen on port {}, got: {}", port, reason);
    }
    set_nonblocking(listen_fd_, true);
    sockaddr_storage bound{};
    socklen_t length = sizeof(bound);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
    port_ = bound.ss_family == AF_INET6
                ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
                : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
    thread_ = std::thread([this] { serve(); });
  }

  ~Server() {
    const char byte = 1;
    [[maybe_unused]] const ssize_t written = ::write(wake_[1], &byte, 1);
    thread_.join();
    for (Client& client : clients_) close_socket(client.fd);
    close_socket(listen_fd_);
    close_socket(wake_[0]);
    close_socket(wake_[1]);
  }

  int port() const { return port_; }

 private:
  struct Client {
    int fd = -1;
    Bytes in = {};
    Bytes out = {};
    Command parked = Command::Get;  // a get or a wait waiting for `parked_keys`
    std::vector<std::string> parked_keys = {};
    bool is_parked = false;
  };

  void serve() {
    try {
      std::vector<pollfd> polled;
      for (;;) {
        polled.clear();
        polled.push_back({wake_[0], POLLIN, 0});
        polled.push_back({listen_fd_, POLLIN, 0});
        for (const Client& client : clients_) {
          polled.push_back({client.fd, short(client.out.empty() ? POLLIN : POLLIN | POLLOUT), 0});
        }
        if (poll(polled.data(), polled.size(), -1) < 0) {
          if (errno == EINTR) continue;
          HG_ERROR("poll failed: {}", errno_text());
        }
        if (polled[0].revents != 0) return;
        // Clients accepted now join after those polled, whose indices stay valid.
        const size_t polled_clients = clients_.size();
        if (polled[1].revents & POLLIN) accept_clients();
        for (size_t i = 0; i < polled_clients; ++i) {
          const short events = polled[i + 2].revents;
          if (events & (POLLIN | POLLHUP | POLLERR)) receive(clients_[i]);
          if ((events & POLLOUT) && clients_[i].fd >= 0) flush(clients_[i]);
        }
        std::erase_if(clients_, [](const Client& client) { return client.fd < 0; });
      }
    } catch (const std::exception& error) {
      std::fprintf(stderr, "hg::distributed::TCPStore: the server on port %d stopped: %s\n", port_,
                   error.what());
    }
  }

  void accept_clients() {
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN once every pending connection is in
      set_no_delay(fd);
      clients_.push_back(Client{.fd = fd});
    }
  }

  void receive(Client& client) {
    uint8_t buffer[64 * 1024];
    for (;;) {
      const ssize_t got = recv(client.fd, buffer, sizeof(buffer), 0);
      if (got > 0) {
        client.in.insert(client.in.end(), buffer, buffer + got);
        continue;
      }
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (got < 0 && errno == EINTR) continue;
      close_socket(client.fd);  // closed by the client, or broken
      return;
    }
    run_requests(client);
  }

  // Runs every complete request in the client's buffer, stopping at a parked one.
  void run_requests(Client& client) {
    while (client.fd >= 0 && !client.is_parked) {
      const size_t used = run_one_request(client);
      if (used == 0) return;
      client.in.erase(client.in.begin(), client.in.begin() + ptrdiff_t(used));
    }
  }

  // Runs the request at the front of the client's buffer and returns its size, or 0 while it
  // is incomplete. A malformed request closes the connection.
  size_t run_one_request(Client& client) {
    const Bytes& in = client.in;
    size_t at = 0;
    auto has = [&](uint64_t bytes) { return in.size() - at >= bytes; };
    if (!has(5)) return 0;
    const auto command = Command(in[0]);
    const uint64_t key_count = get_uint(&in[1], 4);
    at = 5;
    if (command < Command::Set || command > Command::Wait || key_count > kMaxKeys ||
        (key_count != 1 && command != Command::Check && command != Command::Wait)) {
      close_socket(client.fd);
      return 0;
    }
    std::vector<std::string> keys;
    for (uint64_t k = 0; k < key_count; ++k) {
      if (!has(4)) return 0;
      const uint64_t length = get_uint(&in[at], 4);
      if (length > kMaxKeyBytes) {
        close_socket(client.fd);
        return 0;
      }
      at += 4;
      if (!has(length)) return 0;
      keys.emplace_back(reinterpret_cast<const char*>(&in[at]), length);
      at += length;
    }
    switch (command) {
      case Command::Set: {
        if (!has(8)) return 0;
        const uint64_t length = get_uint(&in[at], 8);
        if (length > kMaxValueBytes) {
          close_socket(client.fd);
          return 0;
        }
        at += 8;
        if (!has(length)) return 0;
        data_[keys[0]] = Bytes(in.begin() + ptrdiff_t(at), in.begin() + ptrdiff_t(at + length));
        at += length;
        reply(client, kOk, {});
        wake_parked();
        break;
      }
      case Command::Add: {
        if (!has(8)) return 0;
        const auto delta = int64_t(get_uint(&in[at], 8));
        at += 8;
        add(client, keys[0], delta);
        break;
      }
      case Command::Check:
        reply(client, kOk, {uint8_t(all_set(keys) ? 1 : 0)});
        break;
      case Command::Get:
      case Command::Wait:
        client.parked = command;
        client.parked_keys = std::move(keys);
        client.is_parked = true;
        answer_if_ready(client);
        break;
    }
    return at;
  }

  void add(Client& client, const std::string& key, int64_t delta) {
    int64_t value = 0;
    if (const auto found = data_.find(key); found != data_.end()) {
      const auto* text = reinterpret_cast<const char*>(found->second.data());
      const auto [end, error] = std::from_chars(text, text + found->second.size(), value);
      if (error != std::errc() || end != text + found->second.size()) {
        const std::string message = fmt::format(
            "add: expected key '{}' to hold a decimal integer, got {} bytes that are not one", key,
            found->second.size());
        reply(client, kFailed, Bytes(message.begin(), message.end()));
        return;
      }
    }
    int64_t sum = 0;
    if (__builtin_add_overflow(value, delta, &sum)) {
      const std::string message = fmt::format(
          "add: expected key '{}' + {} to fit int64, got {} + {}", key, delta, value, delta);
      reply(client, kFailed, Bytes(message.begin(), message.end()));
      return;
    }
    const std::string text = std::to_string(sum);
    data_[key] = Bytes(text.begin(), text.end());
    Bytes payload;
    put_uint(payload, uint64_t(sum), 8);
    reply(client, kOk, payload);
    wake_parked();
  }

  bool all_set(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(),
                       [&](const std::string& key) { return data_.count(key) != 0; });
  }

  void answer_if_ready(Client& client) {
    if (!client.is_parked || !all_set(client.parked_keys)) return;
    client.is_parked = false;
    reply(client, kOk, client.parked == Command::Get ? data_.at(client.parked_keys[0]) : Bytes{});
    client.parked_keys.clear();
  }

  // After a set or an add: answers the parked requests it completed, and runs what their
  // clients sent after them.
  void wake_parked() {
    for (Client& client : clients_) {
      if (!client.is_parked || client.fd < 0) continue;
      answer_if_ready(client);
      if (!client.is_parked) run_requests(client);
    }
  }

  void reply(Client& client, uint8_t status, const Bytes& payload) {
    client.out.push_back(status);
    put_uint(client.out, payload.size(), 8);
    client.out.insert(client.out.end(), payload.begin(), payload.end());
    flush(client);
  }

  void flush(Client& client) {
    size_t sent = 0;
    while (sent < client.out.size()) {
      const ssize_t n =
          send(client.fd, client.out.data() + sent, client.out.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += size_t(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;  // the rest goes when poll() says the socket takes more
      } else {
        close_socket(client.fd);
        return;
      }
    }
    client.out.erase(client.out.begin(), client.out.begin() + ptrdiff_t(sent));
  }

  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  std::vector<Client> clients_;
  std::unordered_map<std::string, Bytes> data_;
  std::thread thread_;
};

TCPStore::TCPStore(std::string host, int port, int world_size, bool is_master,
                   std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port), world_size_(world_size), timeout_(timeout) {
  HG_CHECK(!host_.empty(), "TCPStore: expected a host name or address, got an empty one");
  HG_CHECK(port >= (is_master ? 0 : 1) && port <= 65535,
           "TCPStore: expected a port in [{}, 65535]{}, got {}", is_master ? 0 : 1,
           is_master ? " (0: any free port)" : "", port);
  HG_CHECK(world_size >= 1, "TCPStore: expected a world size of at least 1, got {}", world_size);
  HG_CHECK(timeout.count() > 0, "TCPStore: expected a positive timeout, got {} ms",
           timeout.count());
  if (is_master) {
    server_ = std::make_unique<Server>(port);
    port_ = server_->port();
  }
  std::lock_guard lock(socket_mutex_);
  try {
    connect_to_server();
    // The last store to join marks the job complete for wait_for_workers().
    Bytes message = request_header(Command::Add, {kJoinedKey});
    put_uint(message, 1, 8);
    const Bytes sum = request("TCPStore", "", message);
    if (int64_t(get_uint(sum.data(), 8)) == world_size_) {
      Bytes mark = request_header(Command::Set, {kAllJoinedKey});
      put_uint(mark, 0, 8);
      request("TCPStore", "", mark);
    }
  } catch (...) {
    close_socket(socket_);
    throw;
  }
}

TCPStore::~TCPStore() {
  close_socket(socket_);
  server_.reset();
}

std::string TCPStore::address() const {
  // An IPv6 literal takes brackets, as in a URL.
  return host_.find(':') != std::string::npos ? fmt::format("[{}]:{}", host_, port_)
                                              : fmt::format("{}:{}", host_, port_);
}

void TCPStore::connect_to_server() {
  const Clock::time_point deadline = Clock::now() + timeout_;
  const std::string port_text = std::to_string(port_);
  std::string last_failure = "no attempt";
  auto pause = std::chrono::milliseconds(10);
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int resolved = getaddrinfo(host_.c_str(), port_text.c_str(), &hints, &found);
    if (resolved != 0)
      last_failure = fmt::format("cannot resolve the host: {}", gai_strerror(resolved));
    for (addrinfo* candidate = found; candidate != nullptr; candidate = candidate->ai_next) {
      int fd = socket(candidate->ai_family, candidate->ai_socktype | SOCK_CLOEXEC,
                      candidate->ai_protocol);
      if (fd < 0) continue;
      // A non-blocking connect, so that an address that never answers costs no more than the
      // time left.
      set_nonblocking(fd, true);
      int status = connect(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 ? 0 : errno;
      if (status == EINPROGRESS) {
        pollfd polled{fd, POLLOUT, 0};
        status = poll(&polled, 1, milliseconds_until(deadline)) == 1 ? 0 : ETIMEDOUT;
        socklen_t length = sizeof(status);
        if (status == 0) getsockopt(fd, SOL_SOCKET, SO_ERROR, &status, &length);
      }
      if (status == 0) {
        set_nonblocking(fd, false);
        set_no_delay(fd);
        freeaddrinfo(found);
        socket_ = fd;
        return;
      }
      last_failure = std::strerror(status);
      close_socket(fd);
    }
    if (found != nullptr) freeaddrinfo(found);
    if (Clock::now() + pause >= deadline) break;
    std::this_thread::sleep_for(pause);  // the master may not listen yet
    pause = std::min(pause * 2, std::chrono::milliseconds(250));
  }
  HG_ERROR("TCPStore: expected to reach the store server at {} within {} ms, got: {}", address(),
           timeout_.count(), last_failure);
}

std::vector<uint8_t> TCPStore::request(std::string_view operation, std::string_view what,
                                       const std::vector<uint8_t>& message) {
  if (socket_ < 0) connect_to_server();
  const Clock::time_point deadline = Clock::now() + timeout_;
  size_t sent = 0;
  while (sent < message.size()) {
    const ssize_t n = send(socket_, message.data() + sent, message.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = errno_text();
      close_socket(socket_);
      HG_ERROR("{}: expected to reach the store server at {}, got: {} (the master store is gone)",
               operation, address(), reason);
    }
    sent += size_t(n);
  }
  auto receive = [&](uint8_t* into, size_t bytes) {
    size_t got = 0;
    while (got < bytes) {
      pollfd polled{socket_, POLLIN, 0};
      const int ready = poll(&polled, 1, milliseconds_until(deadline));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        // The server may still answer this request: a fresh connection keeps that late reply
        // from being read as another request's (NOTE [TCP store]).
        close_socket(socket_);
        if (what.empty()) {
          HG_ERROR("{}: the store server at {} did not answer within {} ms", operation, address(),
                   timeout_.count());
        }
        HG_ERROR("{}: {} within {} ms (the store's timeout; store server at {})", operation, what,
                 timeout_.count(), address());
      }
      const ssize_t n = recv(socket_, into + got, bytes - got, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close_socket(socket_);
        HG_ERROR("{}: the store server at {} closed the connection (the master store is gone)",
                 operation, address());
      }
      got += size_t(n);
    }
  };
  uint8_t header[9];
  receive(header, sizeof(header));
  const uint64_t length = get_uint(header + 1, 8);
  HG_CHECK(length <= kMaxValueBytes, "{}: expected a reply of at most {} bytes, got {}", operation,
           kMaxValueBytes, length);
  Bytes payload(length);
  receive(payload.data(), payload.size());
  if (header[0] != kOk) {
    HG_ERROR("{} (store server at {}): {}", operation, address(),
             std::string(payload.begin(), payload.end()));
  }
  return payload;
}

void TCPStore::set(std::string_view key, const std::vector<uint8_t>& value) {
  HG_CHECK(key.size() <= kMaxKeyBytes, "TCPStore::set: expected a key of at most {} bytes, got {}",
           kMaxKeyBytes, key.size());
  HG_CHECK(value.size() <= kMaxValueBytes,
           "TCPStore::set: expected a value of at most {} bytes, got {}", kMaxValueBytes,
           value.size());
  Bytes message = request_header(Command::Set, {key});
  put_uint(message, value.size(), 8);
  message.insert(message.end(), value.begin(), value.end());
  std::lock_guard lock(socket_mutex_);
  request("TCPStore::set", "", message);
}

void TCPStore::set(std::string_view key, std::string_view value) {
  set(key, Bytes(value.begin(), value.end()));
}

std::vector<uint8_t> TCPStore::get(std::string_view key) {
  HG_CHECK(key.size() <= kMaxKeyBytes, "TCPStore::get: expected a key of at most {} bytes, got {}",
           kMaxKeyBytes, key.size());
  std::lock_guard lock(socket_mutex_);
  return request("TCPStore::get", fmt::format("key '{}' was not set", key),
                 request_header(Command::Get, {key}));
}

int64_t TCPStore::add(std::string_view key, int64_t delta) {
  HG_CHECK(key.size() <= kMaxKeyBytes, "TCPStore::add: expected a key of at most {} bytes, got {}",
           kMaxKeyBytes, key.size());
  Bytes message = request_header(Command::Add, {key});
  put_uint(message, uint64_t(delta), 8);
  std::lock_guard lock(socket_mutex_);
  const Bytes sum = request("TCPStore::add", "", message);
  return int64_t(get_uint(sum.data(), 8));
}

namespace {

std::vector<std::string_view> checked_keys(std::string_view operation,
                                           const std::vector<std::string>& keys) {
  HG_CHECK(keys.size() <= kMaxKeys, "{}: expected at most {} keys, got {}", operation, kMaxKeys,
           keys.size());
  std::vector<std::string_view> views;
  for (const std::string& key : keys) {
    HG_CHECK(key.size() <= kMaxKeyBytes, "{}: expected keys of at most {} bytes, got one of {}",
             operation, kMaxKeyBytes, key.size());
    views.push_back(key);
  }
  return views;
}

}  // namespace

bool TCPStore::check(const std::vector<std::string>& keys) {
  const Bytes message = request_header(Command::Check, checked_keys("TCPStore::check", keys));
  std::lock_guard lock(socket_mutex_);
  return request("TCPStore::check", "", message).at(0) == 1;
}

void TCPStore::wait(const std::vector<std::string>& keys) {
  const Bytes message = request_header(Command::Wait, checked_keys("TCPStore::wait", keys));
  std::lock_guard lock(socket_mutex_);
  request("TCPStore::wait", fmt::format("keys {} were not all set", quoted_keys(keys)), message);
}

void TCPStore::wait_for_workers() {
  std::lock_guard lock(socket_mutex_);
  request("TCPStore::wait_for_workers",
          fmt::format("fewer than {} stores (the world size) were made", world_size_),
          request_header(Command::Wait, {kAllJoinedKey}));
}

std::unique_ptr<TCPStore> make_launcher_store(const LaunchEnvironment& env,
                                              std::chrono::milliseconds timeout) {
  HG_CHECK(!env.master_addr.empty(),
           "init_process_group: the {} rendezvous expected MASTER_ADDR (rank 0's host), got it "
           "unset",
           env.launcher);
  HG_CHECK(env.master_port >= 1 && env.master_port <= 65535,
           "init_process_group: the {} rendezvous expected MASTER_PORT in [1, 65535], got {}",
           env.launcher,
           env.master_port == 0 ? std::string("it unset or 0") : std::to_string(env.master_port));
  return std::make_unique<TCPStore>(env.master_addr, env.master_port, env.world_size, env.rank == 0,
                                    timeout);
}

}  // namespace hg::distributed

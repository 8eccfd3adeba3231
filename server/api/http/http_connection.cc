#include "server/api/http/http_connection.h"

#include <fcntl.h>
#include <httplib.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "server/api/error_mapping.h"

namespace ropeserve::api {

namespace {

using Clock = std::chrono::steady_clock;

// ---- transports: non-blocking reads and writes ----

// n >= 0: done (0 from a read: the peer closed); n < 0 with `wait`: poll
// for `wait` and retry; n < 0 without: the connection failed.
struct Io {
  ssize_t n;
  short wait;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual Io Recv(char* p, std::size_t n) = 0;
  virtual Io Send(const char* p, std::size_t n) = 0;
  virtual bool Buffered() const { return false; }  // bytes readable without the socket
};

class PlainTransport final : public Transport {
 public:
  explicit PlainTransport(int fd) : fd_(fd) {}
  Io Recv(char* p, std::size_t n) override { return Result(::recv(fd_, p, n, 0), POLLIN); }
  Io Send(const char* p, std::size_t n) override { return Result(::send(fd_, p, n, MSG_NOSIGNAL), POLLOUT); }

 private:
  static Io Result(ssize_t r, short wait) {
    if (r >= 0) return {r, 0};
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return {-1, wait};
    return {-1, 0};
  }
  int fd_;
};

class TlsTransport final : public Transport {
 public:
  TlsTransport(SSL_CTX* ctx, int fd) : ssl_(SSL_new(ctx)) {
    if (ssl_ != nullptr) SSL_set_fd(ssl_, fd);
  }
  ~TlsTransport() override {
    if (ssl_ == nullptr) return;
    if (handshaken_) SSL_shutdown(ssl_);  // best effort: the socket is non-blocking
    SSL_free(ssl_);
  }
  bool ok() const { return ssl_ != nullptr; }
  Io Handshake() { return Result(SSL_accept(ssl_), true); }
  void Handshaken() { handshaken_ = true; }
  Io Recv(char* p, std::size_t n) override {
    return Result(SSL_read(ssl_, p, static_cast<int>(std::min<std::size_t>(n, INT32_MAX))), false);
  }
  Io Send(const char* p, std::size_t n) override {
    return Result(SSL_write(ssl_, p, static_cast<int>(std::min<std::size_t>(n, INT32_MAX))), false);
  }
  bool Buffered() const override { return SSL_pending(ssl_) > 0; }

 private:
  Io Result(int r, bool handshake) {
    if (r > 0) return {r, 0};
    const int err = SSL_get_error(ssl_, r);
    ERR_clear_error();
    if (err == SSL_ERROR_WANT_READ) return {-1, POLLIN};
    if (err == SSL_ERROR_WANT_WRITE) return {-1, POLLOUT};
    if (!handshake && (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && r == 0))) return {0, 0};
    return {-1, 0};
  }
  SSL* ssl_;
  bool handshaken_ = false;
};

// Waits for `events` on `fd` until `deadline`; false on timeout, or when
// `stop` (checked every 100 ms) turns true.
bool PollUntil(int fd, short events, Clock::time_point deadline, const std::function<bool()>& stop = nullptr) {
  for (;;) {
    // Rounded up: "0 ms left" must mean the deadline has passed.
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left, stop ? 100 : left)));
    if (r > 0) return true;  // ready, or an error the next read/write reports
    if (r < 0 && errno != EINTR) return false;
    if (stop && stop()) return false;
  }
}

// ---- one connection ----

class Connection {
 public:
  Connection(int fd, Transport& t, const ConnectionLimits& limits) : fd_(fd), t_(t), limits_(limits) {}

  enum class Head { kOk, kClosed, kTooLarge, kTimeout };

  bool HasBuffered() const { return pos_ < buf_.size() || t_.Buffered(); }

  // Waits for a request's first byte, at most keep_alive_timeout.
  bool WaitForRequest(const std::function<bool()>& stop) {
    if (HasBuffered()) return true;
    return PollUntil(fd_, POLLIN, Clock::now() + limits_.keep_alive_timeout, stop);
  }

  // Starts a request: reads until its head is complete, within the caps
  // and `deadline`, which then also bounds reading its body.
  Head ReadHead(Clock::time_point deadline) {
    deadline_ = deadline;
    body_expected_ = body_read_ = close_after_ = timed_out_ = false;
    std::size_t scanned = pos_;
    for (;;) {
      // Empty lines before a request line are ignored (RFC 9112, 2.2).
      while (pos_ < buf_.size() && (buf_[pos_] == '\r' || buf_[pos_] == '\n')) ++pos_;
      scanned = std::max(scanned, pos_);
      for (std::size_t i = scanned; i < buf_.size(); ++i) {
        if (buf_[i] != '\n') continue;
        if (++lines_ > limits_.max_headers + 1) return Head::kTooLarge;
        const bool blank = i >= 1 && (buf_[i - 1] == '\n' || (buf_[i - 1] == '\r' && i >= 2 && buf_[i - 2] == '\n'));
        if (blank) {
          if (i + 1 - pos_ > limits_.max_header_bytes) return Head::kTooLarge;
          if (!InspectHead(pos_, i + 1)) {
            // Neither Content-Length nor Transfer-Encoding: the body is
            // empty (RFC 9112, 6.3), where cpp-httplib would read a POST's
            // until the connection closes (a bodyless cancel would wait
            // for the read timeout). Say so before the blank line.
            buf_.insert(buf_[i - 1] == '\r' ? i - 1 : i, "Content-Length: 0\r\n");
          }
          lines_ = 0;
          return Head::kOk;
        }
      }
      scanned = buf_.size();
      if (buf_.size() - pos_ > limits_.max_header_bytes) return Head::kTooLarge;
      char tmp[16384];
      const ssize_t r = Fill(tmp, sizeof tmp);
      if (r <= 0) return timed_out_ && buf_.size() > pos_ ? Head::kTimeout : Head::kClosed;
      buf_.append(tmp, static_cast<std::size_t>(r));
    }
  }

  // httplib::Stream's read: buffered bytes first, then the socket, within
  // the request's deadline (until the body is read).
  ssize_t Read(char* p, std::size_t n) {
    if (pos_ < buf_.size()) {
      const std::size_t k = std::min(n, buf_.size() - pos_);
      std::memcpy(p, buf_.data() + pos_, k);
      pos_ += k;
      if (pos_ == buf_.size()) {
        buf_.clear();
        pos_ = 0;
      }
      return static_cast<ssize_t>(k);
    }
    return Fill(p, n);
  }

  // Writes some of `p`; -1 when the peer takes nothing for write_timeout.
  ssize_t Write(const char* p, std::size_t n) {
    const auto deadline = Clock::now() + limits_.write_timeout;
    for (;;) {
      const Io r = t_.Send(p, n);
      if (r.n >= 0) return r.n;
      if (r.wait == 0 || !PollUntil(fd_, r.wait, deadline)) return -1;
    }
  }

  bool Writable() const {
    pollfd p{fd_, POLLOUT | POLLRDHUP, 0};
    return ::poll(&p, 1, static_cast<int>(limits_.write_timeout.count())) > 0 &&
           (p.revents & (POLLERR | POLLHUP | POLLRDHUP)) == 0;
  }

  bool Gone() const {
    pollfd p{fd_, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) != 0;
  }

  int fd() const { return fd_; }
  void BodyRead() {
    body_read_ = true;
    deadline_ = Clock::time_point::max();
  }
  void CloseAfter() { close_after_ = true; }
  bool TimedOut() const { return timed_out_; }
  // The connection cannot carry another request: asked to close, or a
  // request body is left unread.
  bool MustClose() const { return close_after_ || (body_expected_ && !body_read_); }

 private:
  ssize_t Fill(char* p, std::size_t n) {
    for (;;) {
      const Io r = t_.Recv(p, n);
      if (r.n >= 0) return r.n;
      if (r.wait == 0) return -1;
      if (!PollUntil(fd_, r.wait, deadline_)) {
        timed_out_ = Clock::now() >= deadline_;
        return -1;
      }
    }
  }

  // Whether the request announces a body (Content-Length > 0 or chunked).
  // False when it has neither header.
  bool InspectHead(std::size_t begin, std::size_t end) {
    auto lower = [](std::string s) {
      for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return s;
    };
    const std::string head = lower(buf_.substr(begin, end - begin));
    bool framed = false;
    for (const char* h : {"\ncontent-length:", "\ntransfer-encoding:"}) {
      const std::size_t at = head.find(h);
      if (at == std::string::npos) continue;
      framed = true;
      const std::size_t v = at + std::strlen(h), eol = head.find('\n', v);
      const std::string value = head.substr(v, eol - v);
      if (value.find_first_of("123456789") != std::string::npos || value.find("chunked") != std::string::npos)
        body_expected_ = true;
    }
    return framed;
  }

  int fd_;
  Transport& t_;
  const ConnectionLimits& limits_;
  std::string buf_;
  std::size_t pos_ = 0;
  std::size_t lines_ = 0;
  Clock::time_point deadline_ = Clock::time_point::max();
  bool body_expected_ = false, body_read_ = false, close_after_ = false, timed_out_ = false;
};

thread_local Connection* t_connection = nullptr;
thread_local bool t_rejecting = false;  // this thread answers connections over the limit

// httplib's view of a Connection.
class ConnStream final : public httplib::Stream {
 public:
  explicit ConnStream(Connection& c) : c_(c) {}
  bool is_readable() const override { return c_.HasBuffered(); }
  bool is_writable() const override { return c_.Writable(); }
  ssize_t read(char* ptr, size_t size) override { return c_.Read(ptr, size); }
  ssize_t write(const char* ptr, size_t size) override { return c_.Write(ptr, size); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { Address(false, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { Address(true, ip, port); }
  socket_t socket() const override { return c_.fd(); }

 private:
  void Address(bool local, std::string& ip, int& port) const {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int r = local ? ::getsockname(c_.fd(), reinterpret_cast<sockaddr*>(&addr), &len)
                        : ::getpeername(c_.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
    if (r != 0) return;
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                      NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      port = std::atoi(serv);
    }
  }
  Connection& c_;
};

// A complete response written without httplib (the request could not be
// parsed into one it can answer).
void WriteStatus(Connection& c, int status, const char* reason, const char* message) {
  const std::string body = ErrorJson(MalformedRequest(message), status);
  const std::string out =
      "HTTP/1.1 " + std::to_string(status) + " " + reason +
      "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  for (std::size_t done = 0; done < out.size();) {
    const ssize_t n = c.Write(out.data() + done, out.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

// Over the connection limit: 503 without reading the request, then close.
// Plain TCP only (a TLS client would need a handshake first: it is closed).
void RejectFast(int fd, bool tls) {
  if (!tls) {
    static const std::string kBody = ErrorJson(Unavailable("the server has too many open connections; retry later"));
    static const std::string kResponse =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: "
        "close\r\nContent-Length: " +
        std::to_string(kBody.size()) + "\r\n\r\n" + kBody;
    (void)::send(fd, kResponse.data(), kResponse.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::shutdown(fd, SHUT_WR);
    // Take what the client already sent, so that closing does not reset
    // the connection before it reads the answer.
    char drain[4096];
    while (::recv(fd, drain, sizeof drain, MSG_DONTWAIT) > 0) {
    }
  }
  ::close(fd);
}

// Connections are served by threads created as needed, at most
// `max_connections` at once; the next one goes to the reject thread.
class ConnectionQueue final : public httplib::TaskQueue {
 public:
  explicit ConnectionQueue(std::size_t max_connections) : max_(std::max<std::size_t>(max_connections, 1)) {
    reject_thread_ = std::thread([this] {
      t_rejecting = true;
      for (;;) {
        std::function<void()> fn;
        {
          std::unique_lock<std::mutex> lock(mu_);
          reject_cv_.wait(lock, [&] { return shutdown_ || !rejects_.empty(); });
          if (rejects_.empty()) return;
          fn = std::move(rejects_.front());
          rejects_.pop_front();
        }
        fn();  // closes the socket (the override sees t_rejecting)
      }
    });
  }
  ~ConnectionQueue() override { shutdown(); }

  // void in cpp-httplib 0.11 (Debian 12), bool ("accepted") in 0.18 (Debian
  // 13): every connection is taken, to be served or refused with a 503.
  using EnqueueResult = decltype(std::declval<httplib::TaskQueue&>().enqueue(std::function<void()>()));
  EnqueueResult enqueue(std::function<void()> fn) override {
    Enqueue(std::move(fn));
    return static_cast<EnqueueResult>(true);  // a void expression where the result is void
  }
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutdown_) return;
      shutdown_ = true;
    }
    cv_.notify_all();
    reject_cv_.notify_all();
    for (auto& t : threads_) t.join();
    reject_thread_.join();
  }

 private:
  void Enqueue(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    if (busy_ >= max_) {
      rejects_.push_back(std::move(fn));
      reject_cv_.notify_one();
      return;
    }
    ++busy_;
    tasks_.push_back(std::move(fn));
    // A waiting thread counts as idle until it has taken a task, so two
    // connections arriving together must not both count on the same one
    // (the second would then wait for some other connection to end).
    if (tasks_.size() <= idle_) {
      cv_.notify_one();
    } else {
      threads_.emplace_back([this] { Work(); });
    }
  }

  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (tasks_.empty()) {
        ++idle_;
        cv_.wait(lock, [&] { return shutdown_ || !tasks_.empty(); });
        --idle_;
        if (tasks_.empty()) return;
      }
      std::function<void()> fn = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
      --busy_;
    }
  }

  const std::size_t max_;
  std::mutex mu_;
  std::condition_variable cv_, reject_cv_;
  std::deque<std::function<void()>> tasks_, rejects_;
  std::size_t busy_ = 0, idle_ = 0;
  bool shutdown_ = false;
  std::vector<std::thread> threads_;
  std::thread reject_thread_;
};

template <typename Base>
class GuardedServer final : public Base {
 public:
  template <typename... Args>
  explicit GuardedServer(const ConnectionLimits& limits, Args&&... args)
      : Base(std::forward<Args>(args)...), limits_(limits) {
    const std::size_t max = limits.max_connections;
    this->new_task_queue = [max] { return new ConnectionQueue(max); };
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    constexpr bool kTls = std::is_same_v<Base, httplib::SSLServer>;
    if (t_rejecting) {
      RejectFast(sock, kTls);
      return false;
    }
    const int flags = ::fcntl(sock, F_GETFL, 0);
    ::fcntl(sock, F_SETFL, flags | O_NONBLOCK);
    std::unique_ptr<Transport> transport;
    if constexpr (kTls) {
      auto tls = std::make_unique<TlsTransport>(this->ssl_context(), sock);
      bool ok = tls->ok();
      const auto deadline = Clock::now() + limits_.request_read_timeout;
      while (ok) {
        const Io r = tls->Handshake();
        if (r.n >= 0) break;
        ok = r.wait != 0 && PollUntil(sock, r.wait, deadline);
      }
      if (!ok) return Close(sock, false);
      tls->Handshaken();
      transport = std::move(tls);
    } else {
      transport = std::make_unique<PlainTransport>(sock);
    }
    Connection conn(sock, *transport, limits_);
    t_connection = &conn;
    auto stopping = [this] { return this->svr_sock_ == INVALID_SOCKET; };
    bool ret = true;
    bool linger = false;  // the client may still be sending: let it read our answer
    for (int i = 0; i < limits_.max_requests_per_connection && !stopping(); ++i) {
      if (!conn.WaitForRequest(stopping)) break;
      const Connection::Head head = conn.ReadHead(Clock::now() + limits_.request_read_timeout);
      if (head == Connection::Head::kClosed) break;
      if (head == Connection::Head::kTooLarge || head == Connection::Head::kTimeout) {
        if (head == Connection::Head::kTooLarge) {
          WriteStatus(conn, 431, "Request Header Fields Too Large", "the request head is too large");
        } else {
          WriteStatus(conn, 408, "Request Timeout", "the request did not arrive in time");
        }
        linger = true;
        break;
      }
      ConnStream strm(conn);
      bool closed = false;
      const bool last = i + 1 == limits_.max_requests_per_connection || stopping();
      ret = ProcessRequest(strm, last, closed);
      if (conn.MustClose()) {
        linger = true;
        break;
      }
      if (!ret || closed || last) break;
    }
    t_connection = nullptr;
    transport.reset();
    if (linger) Linger(sock);
    return Close(sock, ret);
  }

  // httplib's request processing on our stream: cpp-httplib 0.18 (Debian
  // 13) takes the peer's and our addresses, 0.11 (Debian 12) asks the stream.
  bool ProcessRequest(ConnStream& strm, bool last, bool& closed) {
    if constexpr (requires { this->process_request(strm, last, closed, nullptr); }) {
      return this->process_request(strm, last, closed, nullptr);
    } else {
      std::string remote_ip, local_ip;
      int remote_port = 0, local_port = 0;
      strm.get_remote_ip_and_port(remote_ip, remote_port);
      strm.get_local_ip_and_port(local_ip, local_port);
      return this->process_request(strm, remote_ip, remote_port, local_ip, local_port, last, closed, nullptr);
    }
  }

  // A close with unread input makes the kernel reset the connection, and a
  // client still sending may then never read the answer we wrote. Half-close
  // and discard what arrives for a moment first (a bounded "lingering
  // close", as web servers do).
  static void Linger(int sock) {
    ::shutdown(sock, SHUT_WR);
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    std::size_t drained = 0;
    char buf[16384];
    while (drained < (std::size_t{4} << 20) && PollUntil(sock, POLLIN, deadline)) {
      const ssize_t n = ::recv(sock, buf, sizeof buf, 0);
      if (n > 0) {
        drained += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      break;  // EOF or an error: the client has our answer or is gone
    }
  }

  static bool Close(int sock, bool ret) {
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ret;
  }

  const ConnectionLimits limits_;
};

}  // namespace

std::unique_ptr<httplib::Server> MakeGuardedServer(const ConnectionLimits& limits, const std::string& tls_cert,
                                                   const std::string& tls_key) {
  if (!tls_cert.empty())
    return std::make_unique<GuardedServer<httplib::SSLServer>>(limits, tls_cert.c_str(), tls_key.c_str());
  return std::make_unique<GuardedServer<httplib::Server>>(limits);
}

namespace connection {
bool ClientGone() { return t_connection != nullptr && t_connection->Gone(); }
void BodyRead() {
  if (t_connection != nullptr) t_connection->BodyRead();
}
bool ReadTimedOut() { return t_connection != nullptr && t_connection->TimedOut(); }
void CloseAfterResponse() {
  if (t_connection != nullptr) t_connection->CloseAfter();
}
}  // namespace connection

}  // namespace ropeserve::api

// A small HTTP/1.1 server on one epoll thread: keep-alive, Content-Length bodies, close-delimited
// streams (for SSE), disconnect detection, a body limit. Handlers run on the loop thread and must
// not block; they answer through an Exchange, which any thread may use (the scheduler streams
// tokens through it), so the loop never waits for the engine and the engine never waits for a
// slow client.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace ouro {

struct HttpRequest {
  std::string method, target, path, version;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

using HeaderList = std::vector<std::pair<std::string, std::string>>;

class HttpServer;

// One request's answer. Thread-safe; calls after the answer is complete, or after the client has
// gone, are ignored.
class Exchange {
 public:
  void respond(int status, const std::string& body, const std::string& content_type = "application/json",
               const HeaderList& extra = {});
  // Starts a close-delimited streamed body (the connection closes after end()).
  void begin_stream(int status, const std::string& content_type, const HeaderList& extra = {});
  void send(const std::string& data);
  void end();
  // Called once, on the loop thread, when the client goes away before the answer is complete.
  void on_disconnect(std::function<void()> fn);
  bool gone() const { return gone_.load(); }

 private:
  friend class HttpServer;
  Exchange(HttpServer* s, uint64_t conn, bool keep_alive) : srv_(s), conn_(conn), keep_alive_(keep_alive) {}
  void post(std::string data, bool finished, bool close_after);
  void start(int status, std::string head, bool finished, bool close_after);
  HttpServer* srv_;
  uint64_t conn_;
  bool keep_alive_;
  std::mutex mu_;
  std::string out_;
  bool started_ = false, finished_ = false, close_after_ = false;
  std::atomic<bool> gone_{false};
  std::function<void()> on_gone_;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;            // 0: any free port
  size_t max_body = 8u << 20;
  size_t max_header = 64u << 10;
  int max_connections = 4096;
};

class HttpServer {
 public:
  using Handler = std::function<void(const HttpRequest&, const std::shared_ptr<Exchange>&)>;
  // Answers with a request's status before its handler runs (413, 400 on a malformed request):
  // observe(status) is told of every answer the server makes itself.
  HttpServer(HttpServerOptions o, Handler h, std::function<void(int)> observe = {});
  ~HttpServer();
  // Binds and listens; the bound port (useful with port 0).
  Expected<int> listen();
  // Runs the loop until stop() and every connection has flushed (or `flush_s` has passed).
  void run();
  // Thread-safe: closes the listener (new connections are refused; open ones keep being served).
  void stop_accepting();
  // Thread-safe: run() returns once no connection has an answer in progress or unsent, or after
  // flush_s seconds; idle connections are closed.
  void stop(double flush_s = 5.0);
  // Called from the loop when SIGINT/SIGTERM arrives on the signalfd (if enabled).
  void set_signal_handler(int signal_fd, std::function<void(int)> fn);

 private:
  friend class Exchange;
  struct Conn;
  void wake(uint64_t conn);
  void on_readable(Conn& c);
  void try_parse(Conn& c);
  void flush(Conn& c);
  bool pull(Conn& c);  // moves a started answer's bytes to the connection
  void close_conn(uint64_t id);
  void reply_now(Conn& c, int status, const std::string& message);
  void update_events(Conn& c);

  HttpServerOptions o_;
  Handler handler_;
  std::function<void(int)> observe_;
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1, signal_fd_ = -1;
  std::function<void(int)> on_signal_;
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::unordered_map<int, uint64_t> by_fd_;
  uint64_t next_conn_ = 1;
  std::mutex dirty_mu_;
  std::vector<uint64_t> dirty_;
  std::atomic<bool> stop_accepting_{false}, stopping_{false};
  std::atomic<double> flush_s_{5.0};
};

// "HTTP/1.1 200 OK"-style reason phrases.
const char* http_reason(int status);

}  // namespace ouro

#include "serve/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <nlohmann/json.hpp>

namespace ouro {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = (char)std::tolower((unsigned char)c);
  return s;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}

// The OpenAI error shape for answers the server makes before any handler runs. Messages may quote
// client bytes (a protocol version, a Content-Length), so invalid UTF-8 is replaced, not passed on.
std::string error_json(const std::string& message) {
  const nlohmann::json j = {{"error", {{"message", message}, {"type", "invalid_request_error"}, {"param", nullptr}, {"code", nullptr}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string status_line(int status) { return "HTTP/1.1 " + std::to_string(status) + " " + http_reason(status) + "\r\n"; }

}  // namespace

const char* http_reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

struct HttpServer::Conn {
  uint64_t id = 0;
  int fd = -1;
  std::string rbuf, wbuf;
  size_t wpos = 0;
  std::shared_ptr<Exchange> ex;  // the request being answered, if any
  bool response_done = false;    // the exchange is complete (its bytes may still be in wbuf)
  bool close_after = false;
  bool continue_sent = false;
  bool want_write = false;
};

// ---- Exchange ----

// Bytes wait in out_ until the answer has started (its headers go first); the loop takes them.
void Exchange::post(std::string data, bool finished, bool close_after) {
  bool started;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (finished_ || gone_) return;
    out_ += data;
    if (finished) {
      finished_ = true;
      close_after_ = close_after;
    }
    started = started_;
  }
  if (started) srv_->wake(conn_);
}

void Exchange::start(int status, std::string head, bool finished, bool close_after) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (started_ || gone_) return;
    started_ = true;
    out_ = head + out_;
    if (finished) {
      finished_ = true;
      close_after_ = close_after;
    }
  }
  if (srv_->observe_) srv_->observe_(status);
  srv_->wake(conn_);
}

void Exchange::respond(int status, const std::string& body, const std::string& content_type, const HeaderList& extra) {
  std::string h = status_line(status) + "Content-Type: " + content_type + "\r\nContent-Length: " +
                  std::to_string(body.size()) + "\r\nConnection: " + (keep_alive_ ? "keep-alive" : "close") + "\r\n";
  for (const auto& [k, v] : extra) h += k + ": " + v + "\r\n";
  start(status, h + "\r\n" + body, true, !keep_alive_);
}

void Exchange::begin_stream(int status, const std::string& content_type, const HeaderList& extra) {
  std::string h = status_line(status) + "Content-Type: " + content_type + "\r\nCache-Control: no-cache\r\nConnection: close\r\n";
  for (const auto& [k, v] : extra) h += k + ": " + v + "\r\n";
  start(status, h + "\r\n", false, true);
}

void Exchange::send(const std::string& data) { post(data, false, true); }

void Exchange::end() { post("", true, true); }

void Exchange::on_disconnect(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!gone_) {
      on_gone_ = std::move(fn);
      return;
    }
  }
  fn();
}

// ---- HttpServer ----

HttpServer::HttpServer(HttpServerOptions o, Handler h, std::function<void(int)> observe)
    : o_(std::move(o)), handler_(std::move(h)), observe_(std::move(observe)) {}

HttpServer::~HttpServer() {
  for (auto& [id, c] : conns_) ::close(c->fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Expected<int> HttpServer::listen() {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  const std::string port = std::to_string(o_.port);
  if (int rc = getaddrinfo(o_.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return usage_error("--host '" + o_.host + "': " + gai_strerror(rc));
  std::string err = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) { err = std::strerror(errno); continue; }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      listen_fd_ = fd;
      break;
    }
    err = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(res);
  if (listen_fd_ < 0) return runtime_error("cannot listen on " + o_.host + ":" + port + ": " + err);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(listen_fd_, (sockaddr*)&ss, &len);
  const int bound = ntohs(ss.ss_family == AF_INET6 ? ((sockaddr_in6*)&ss)->sin6_port : ((sockaddr_in*)&ss)->sin_port);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) return runtime_error(std::string("epoll/eventfd: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // the listener
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.u64 = 1;  // the wake-up eventfd
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  next_conn_ = 16;  // ids below are reserved for the listener, eventfd and signalfd
  return bound;
}

void HttpServer::set_signal_handler(int signal_fd, std::function<void(int)> fn) {
  signal_fd_ = signal_fd;
  on_signal_ = std::move(fn);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 2;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, signal_fd_, &ev);
}

void HttpServer::wake(uint64_t conn) {
  {
    std::lock_guard<std::mutex> lk(dirty_mu_);
    dirty_.push_back(conn);
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void HttpServer::stop_accepting() {
  stop_accepting_ = true;
  wake(0);
}

void HttpServer::stop(double flush_s) {
  flush_s_ = flush_s;
  stop_accepting_ = true;
  stopping_ = true;
  wake(0);
}

bool HttpServer::pull(Conn& c) {
  if (!c.ex) return false;
  std::lock_guard<std::mutex> lk(c.ex->mu_);
  if (!c.ex->started_) return false;
  c.wbuf += c.ex->out_;
  c.ex->out_.clear();
  if (c.ex->finished_) {
    c.response_done = true;
    c.close_after = c.ex->close_after_;
  }
  return true;
}

void HttpServer::update_events(Conn& c) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (c.want_write ? (uint32_t)EPOLLOUT : 0u);
  ev.data.u64 = c.id;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
}

void HttpServer::close_conn(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  std::unique_ptr<Conn> c = std::move(it->second);
  conns_.erase(it);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  ::close(c->fd);
  if (c->ex && !c->response_done) {
    std::function<void()> fn;
    {
      std::lock_guard<std::mutex> lk(c->ex->mu_);
      if (!c->ex->finished_) {
        c->ex->gone_ = true;
        fn = std::move(c->ex->on_gone_);
      }
    }
    if (fn) fn();
  }
}

void HttpServer::reply_now(Conn& c, int status, const std::string& message) {
  const std::string body = error_json(message);
  c.wbuf += status_line(status) + "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
            "\r\nConnection: close\r\n\r\n" + body;
  c.response_done = true;
  c.close_after = true;
  c.rbuf.clear();
  if (observe_) observe_(status);
}

void HttpServer::on_readable(Conn& c) {
  const uint64_t id = c.id;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n > 0) {
      // While an answer is in progress, keep reading only to notice a disconnect.
      if (c.rbuf.size() < o_.max_header + o_.max_body + 65536) c.rbuf.append(buf, (size_t)n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && errno == EINTR) continue;
    close_conn(id);  // closed by the peer, or an error
    return;
  }
  if (!c.ex && !c.close_after) try_parse(c);
}

void HttpServer::try_parse(Conn& c) {
  const size_t hdr_end = c.rbuf.find("\r\n\r\n");
  if (hdr_end == std::string::npos) {
    if (c.rbuf.size() > o_.max_header) reply_now(c, 431, "the request's headers are larger than " + std::to_string(o_.max_header) + " bytes");
    flush(c);
    return;
  }
  if (hdr_end > o_.max_header) {
    reply_now(c, 431, "the request's headers are larger than " + std::to_string(o_.max_header) + " bytes");
    flush(c);
    return;
  }
  HttpRequest req;
  const std::string head = c.rbuf.substr(0, hdr_end);
  size_t line_end = head.find("\r\n");
  const std::string first = head.substr(0, line_end);
  {
    const size_t a = first.find(' '), b = first.rfind(' ');
    if (a == std::string::npos || b == a) {
      reply_now(c, 400, "malformed request line");
      flush(c);
      return;
    }
    req.method = first.substr(0, a);
    req.target = first.substr(a + 1, b - a - 1);
    req.version = first.substr(b + 1);
  }
  if (req.version != "HTTP/1.1" && req.version != "HTTP/1.0") {
    reply_now(c, req.version.rfind("HTTP/", 0) == 0 ? 505 : 400, "unsupported protocol version '" + req.version + "'");
    flush(c);
    return;
  }
  if (req.target.empty() || req.target[0] != '/' || req.method.empty()) {
    reply_now(c, 400, "malformed request line");
    flush(c);
    return;
  }
  req.path = req.target.substr(0, req.target.find('?'));
  size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
  while (pos < head.size()) {
    size_t e = head.find("\r\n", pos);
    if (e == std::string::npos) e = head.size();
    const std::string line = head.substr(pos, e - pos);
    pos = e + 2;
    const size_t colon = line.find(':');
    if (colon == std::string::npos || colon == 0) {
      reply_now(c, 400, "malformed header line");
      flush(c);
      return;
    }
    req.headers[lower(line.substr(0, colon))] = trim(line.substr(colon + 1));
  }
  if (!req.header("transfer-encoding").empty()) {
    reply_now(c, 400, "request bodies with Transfer-Encoding are not supported; send Content-Length");
    flush(c);
    return;
  }
  size_t body_len = 0;
  if (const std::string cl = req.header("content-length"); !cl.empty()) {
    if (cl.size() > 18 || cl.find_first_not_of("0123456789") != std::string::npos) {
      reply_now(c, 400, "invalid Content-Length '" + cl.substr(0, 32) + "'");
      flush(c);
      return;
    }
    body_len = std::stoull(cl);
  }
  if (body_len > o_.max_body) {
    reply_now(c, 413, "the request body (" + std::to_string(body_len) + " bytes) exceeds the limit of " +
                          std::to_string(o_.max_body) + " bytes");
    flush(c);
    return;
  }
  if (c.rbuf.size() < hdr_end + 4 + body_len) {
    if (!c.continue_sent && lower(req.header("expect")) == "100-continue") {
      c.continue_sent = true;
      c.wbuf += "HTTP/1.1 100 Continue\r\n\r\n";
      flush(c);
    }
    return;  // wait for the rest of the body
  }
  req.body = c.rbuf.substr(hdr_end + 4, body_len);
  c.rbuf.erase(0, hdr_end + 4 + body_len);
  c.continue_sent = false;
  const std::string conn_hdr = lower(req.header("connection"));
  const bool keep_alive = req.version == "HTTP/1.1" ? conn_hdr != "close" : conn_hdr == "keep-alive";
  c.ex.reset(new Exchange(this, c.id, keep_alive && !stopping_));
  c.response_done = false;
  const uint64_t id = c.id;
  std::shared_ptr<Exchange> ex = c.ex;
  handler_(req, ex);
  // The handler may have answered at once: pick it up without a round trip through the eventfd.
  auto it = conns_.find(id);
  if (it != conns_.end() && pull(*it->second)) flush(*it->second);
}

void HttpServer::flush(Conn& c) {
  const uint64_t id = c.id;
  while (c.wpos < c.wbuf.size()) {
    const ssize_t n = ::send(c.fd, c.wbuf.data() + c.wpos, c.wbuf.size() - c.wpos, MSG_NOSIGNAL);
    if (n > 0) { c.wpos += (size_t)n; continue; }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!c.want_write) { c.want_write = true; update_events(c); }
      return;
    }
    close_conn(id);  // EPIPE, ECONNRESET: the client is gone
    return;
  }
  c.wbuf.clear();
  c.wpos = 0;
  if (c.want_write) { c.want_write = false; update_events(c); }
  if (!c.response_done) return;
  if (c.close_after) {
    ::shutdown(c.fd, SHUT_WR);
    close_conn(id);
    return;
  }
  c.ex.reset();
  c.response_done = false;
  if (!c.rbuf.empty()) try_parse(c);  // a pipelined request
}

void HttpServer::run() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point deadline = Clock::time_point::max();
  Clock::time_point accept_resume{};  // set while accepting is paused for lack of descriptors
  bool listening = true;
  epoll_event evs[256];
  for (;;) {
    if (stop_accepting_ && listening) {
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
      ::close(listen_fd_);
      listen_fd_ = -1;
      listening = false;
    }
    if (stopping_) {
      if (deadline == Clock::time_point::max())
        deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(flush_s_.load()));
      bool busy = false;
      for (auto& [id, c] : conns_) busy = busy || c->ex || !c->wbuf.empty();
      if (!busy || Clock::now() >= deadline) break;
    }
    if (listening && accept_resume != Clock::time_point{} && Clock::now() >= accept_resume) {
      epoll_event on{};
      on.events = EPOLLIN;
      on.data.u64 = 0;
      epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &on);
      accept_resume = Clock::time_point{};
    }
    const int n = epoll_wait(epoll_fd_, evs, 256, stopping_ || accept_resume != Clock::time_point{} ? 50 : 1000);
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = evs[i].data.u64;
      if (tag == 0) {
        for (;;) {
          const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd < 0) {
            // Out of descriptors: the listener stays readable, so stop watching it for a while
            // instead of spinning on accept (pending connections wait in the backlog).
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
              epoll_event off{};
              off.data.u64 = 0;
              epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &off);
              accept_resume = Clock::now() + std::chrono::milliseconds(100);
            }
            break;
          }
          if ((int)conns_.size() >= o_.max_connections) { ::close(fd); continue; }
          int one = 1;
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          auto c = std::make_unique<Conn>();
          c->id = next_conn_++;
          c->fd = fd;
          epoll_event ev{};
          ev.events = EPOLLIN | EPOLLRDHUP;
          ev.data.u64 = c->id;
          epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
          conns_[c->id] = std::move(c);
        }
      } else if (tag == 1) {
        uint64_t cnt;
        [[maybe_unused]] ssize_t r = ::read(wake_fd_, &cnt, sizeof cnt);
        std::vector<uint64_t> dirty;
        {
          std::lock_guard<std::mutex> lk(dirty_mu_);
          dirty.swap(dirty_);
        }
        std::sort(dirty.begin(), dirty.end());
        dirty.erase(std::unique(dirty.begin(), dirty.end()), dirty.end());
        for (uint64_t id : dirty) {
          auto it = conns_.find(id);
          if (it != conns_.end() && pull(*it->second)) flush(*it->second);
        }
      } else if (tag == 2) {
        signalfd_siginfo si;
        while (::read(signal_fd_, &si, sizeof si) == (ssize_t)sizeof si)
          if (on_signal_) on_signal_((int)si.ssi_signo);
      } else {
        auto it = conns_.find(tag);
        if (it == conns_.end()) continue;
        Conn& c = *it->second;
        const uint32_t e = evs[i].events;
        if (e & EPOLLOUT) flush(c);
        if (conns_.find(tag) == conns_.end()) continue;
        if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) on_readable(c);
      }
    }
  }
  std::vector<uint64_t> ids;
  for (auto& [id, c] : conns_) ids.push_back(id);
  for (uint64_t id : ids) close_conn(id);
}

}  // namespace ouro

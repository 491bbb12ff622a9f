#include "serve/http_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>

namespace ouro::http {

namespace {

using Clock = std::chrono::steady_clock;

std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = (char)std::tolower((unsigned char)c);
  return o;
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return std::string(s.substr(b, e - b));
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Milliseconds left until `deadline` for poll(): 0 once passed, rounded up otherwise.
int ms_left(Clock::time_point deadline) {
  const double ms = std::chrono::duration<double, std::milli>(deadline - Clock::now()).count();
  if (ms <= 0) return 0;
  return (int)std::min<double>(std::ceil(ms), INT_MAX);
}

// Waits until fd is ready for `events`: 1 ready, 0 deadline passed, -1 poll failed.
int wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, ms_left(deadline));
    if (rc > 0) return 1;
    if (rc == 0) return 0;
    if (errno != EINTR) return -1;
  }
}

// Closes a socket when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Resolves and connects (non-blocking, bounded by `deadline`), trying each address in turn.
// Returns the socket, or -1 with *error set.
int connect_to(const Url& u, Clock::time_point deadline, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(u.port);
  if (int rc = ::getaddrinfo(u.host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    *error = "cannot resolve '" + u.host + "': " + gai_strerror(rc);
    return -1;
  }
  std::string last = "no address";
  int fd = -1;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      const int w = wait_fd(fd, POLLOUT, deadline);
      if (w == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        rc = ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0 ? 0 : -1;
        if (rc != 0) errno = err ? err : errno;
      } else {
        rc = -1;
        errno = w == 0 ? ETIMEDOUT : errno;
      }
    }
    if (rc == 0) break;
    last = std::strerror(errno);
    ::close(fd);
    fd = -1;
    if (ms_left(deadline) == 0) break;
  }
  ::freeaddrinfo(res);
  if (fd < 0) {
    *error = "cannot connect to " + u.authority() + ": " + last;
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // requests go out whole
  return fd;
}

// Sends all of `data`. 1 sent, 0 deadline passed, -1 error (*error set).
int send_all(int fd, std::string_view data, Clock::time_point deadline, std::string* error) {
  size_t off = 0;
  while (off < data.size()) {
    // MSG_NOSIGNAL: a peer that closed gives EPIPE here instead of killing us with SIGPIPE.
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const int w = wait_fd(fd, POLLOUT, deadline);
      if (w == 1) continue;
      if (w == 0) return 0;
    }
    *error = std::string("sending the request: ") + std::strerror(errno);
    return -1;
  }
  return 1;
}

enum class ReadResult { kData, kEof, kTimeout, kError };

// Reads what is available (waiting until the deadline for at least one byte).
ReadResult read_some(int fd, Clock::time_point deadline, std::string* out, std::string* error) {
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      out->assign(buf, (size_t)n);
      return ReadResult::kData;
    }
    if (n == 0) return ReadResult::kEof;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      const int w = wait_fd(fd, POLLIN, deadline);
      if (w == 1) continue;
      if (w == 0) return ReadResult::kTimeout;
    }
    *error = std::strerror(errno);
    return ReadResult::kError;
  }
}

// Offset just past the blank line that ends the header block in `b`, or npos.
size_t header_end(const std::string& b) {
  size_t pos = 0;
  for (;;) {
    const size_t nl = b.find('\n', pos);
    if (nl == std::string::npos) return std::string::npos;
    const size_t len = nl - pos;
    if (len == 0 || (len == 1 && b[pos] == '\r')) return nl + 1;
    pos = nl + 1;
  }
}

// Parses the status line and headers of one header block into r. False (with *error) if malformed.
bool parse_head(std::string_view block, Response* r, std::string* error) {
  r->headers.clear();
  bool first = true;
  size_t pos = 0;
  while (pos < block.size()) {
    size_t nl = block.find('\n', pos);
    if (nl == std::string_view::npos) nl = block.size();
    std::string_view line = block.substr(pos, nl - pos);
    pos = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (first) {
      first = false;
      // "HTTP/1.1 200 OK" (the reason phrase may be empty or absent).
      if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || line[8] != ' ' || !all_digits(line.substr(9, 3)) ||
          (line.size() > 12 && line[12] != ' ')) {
        *error = "bad status line '" + std::string(line.substr(0, 80)) + "'";
        return false;
      }
      r->status = std::stoi(std::string(line.substr(9, 3)));
      r->reason = line.size() > 13 ? std::string(line.substr(13)) : "";
      continue;
    }
    if (line.empty()) break;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0 || line[0] == ' ' || line[0] == '\t') {
      *error = "bad header line '" + std::string(line.substr(0, 80)) + "'";
      return false;
    }
    r->headers.emplace_back(lower(trim(line.substr(0, colon))), trim(line.substr(colon + 1)));
  }
  if (first) {
    *error = "empty response head";
    return false;
  }
  return true;
}

}  // namespace

std::string Url::authority() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Expected<Url> parse_url(const std::string& s) {
  auto bad = [&](const std::string& why) -> Error { return usage_error("bad URL '" + s + "': " + why); };
  for (char c : s)
    if ((unsigned char)c <= 0x20 || c == 0x7f) return bad("it contains spaces or control characters");
  if (lower(s.substr(0, 8)) == "https://") return bad("https is not supported (no TLS); use http://");
  if (lower(s.substr(0, 7)) != "http://") return bad("expected http://HOST[:PORT][/PREFIX]");
  const std::string rest = s.substr(7);
  const size_t slash = rest.find('/');
  const std::string auth = rest.substr(0, slash);
  std::string path = slash == std::string::npos ? "" : rest.substr(slash);
  if (rest.find_first_of("?#") != std::string::npos) return bad("query strings and fragments are not supported");
  if (auth.find('@') != std::string::npos) return bad("user names and passwords are not supported");
  Url u;
  std::string port;
  bool has_port = false;
  if (!auth.empty() && auth[0] == '[') {  // [IPv6]:port
    const size_t close = auth.find(']');
    if (close == std::string::npos) return bad("unterminated '[' in the host");
    u.host = auth.substr(1, close - 1);
    const std::string after = auth.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return bad("expected ':PORT' after ']'");
      port = after.substr(1);
      has_port = true;
    }
    for (char c : u.host)
      if (!std::isxdigit((unsigned char)c) && c != ':' && c != '.') return bad("bad IPv6 address");
  } else {
    const size_t colon = auth.find(':');
    if (colon != std::string::npos && auth.find(':', colon + 1) != std::string::npos)
      return bad("IPv6 addresses go in brackets: http://[::1]:8080");
    u.host = auth.substr(0, colon);
    if (colon != std::string::npos) {
      port = auth.substr(colon + 1);
      has_port = true;
    }
    for (char c : u.host)
      if (!std::isalnum((unsigned char)c) && c != '.' && c != '-' && c != '_') return bad("bad character in the host");
  }
  if (u.host.empty()) return bad("missing host");
  if (has_port) {
    if (!all_digits(port) || port.size() > 5 || std::stoi(port) < 1 || std::stoi(port) > 65535)
      return bad("port must be a number in 1..65535");
    u.port = std::stoi(port);
  }
  while (!path.empty() && path.back() == '/') path.pop_back();
  u.prefix = path;
  return u;
}

const char* failure_name(Failure f) {
  switch (f) {
    case Failure::kNone: return "none";
    case Failure::kConnect: return "connect";
    case Failure::kTimeout: return "timeout";
    case Failure::kClosed: return "closed";
    case Failure::kProtocol: return "protocol";
    case Failure::kAborted: return "aborted";
  }
  return "?";
}

std::string Response::header(std::string_view name) const {
  const std::string n = lower(name);
  for (const auto& [k, v] : headers)
    if (k == n) return v;
  return "";
}

bool can_connect(const Url& url, double timeout_s, std::string* error) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  Fd fd{connect_to(url, deadline, error)};
  return fd.fd >= 0;
}

Response request(const Url& url, const Request& req, const Options& opt, const BodySink& sink) {
  Response r;
  auto fail = [&](Failure f, std::string m) {
    r.failure = f;
    r.error = std::move(m);
    return r;
  };
  const auto t0 = Clock::now();
  auto secs = [](double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  const auto deadline = t0 + secs(opt.timeout_s);
  const auto connect_deadline = std::min(deadline, t0 + secs(opt.connect_timeout_s));
  char timeout_msg[64];
  std::snprintf(timeout_msg, sizeof timeout_msg, "timed out after %g s", opt.timeout_s);

  // The request head. Header names and values must not smuggle line breaks.
  std::string head = req.method + " " + (req.path.empty() ? "/" : req.path) + " HTTP/1.1\r\n";
  head += "Host: " + url.authority() + "\r\nConnection: close\r\n";
  for (const auto& [k, v] : req.headers) {
    if ((k + v).find_first_of("\r\n") != std::string::npos) return fail(Failure::kProtocol, "header '" + k + "' contains a line break");
    head += k + ": " + v + "\r\n";
  }
  if (!req.body.empty() || req.method == "POST" || req.method == "PUT" || req.method == "PATCH")
    head += "Content-Length: " + std::to_string(req.body.size()) + "\r\n";
  head += "\r\n";

  std::string err;
  Fd fd{connect_to(url, connect_deadline, &err)};
  if (fd.fd < 0) return fail(Failure::kConnect, err);
  for (std::string_view part : {std::string_view(head), std::string_view(req.body)}) {
    const int s = send_all(fd.fd, part, deadline, &err);
    if (s == 0) return fail(Failure::kTimeout, timeout_msg);
    if (s < 0) return fail(Failure::kClosed, err);
  }

  // Status line and headers (skipping interim 1xx responses).
  std::string buf, chunk;
  size_t end = std::string::npos;
  for (;;) {
    end = header_end(buf);
    if (end != std::string::npos) {
      if (!parse_head(std::string_view(buf).substr(0, end), &r, &err)) return fail(Failure::kProtocol, err);
      if (r.status == 101) return fail(Failure::kProtocol, "unexpected 101 Switching Protocols");
      if (r.status >= 200) break;
      buf.erase(0, end);  // 100 Continue and friends: the real response follows
      continue;
    }
    if (buf.size() > opt.max_header_bytes) return fail(Failure::kProtocol, "response headers exceed " + std::to_string(opt.max_header_bytes) + " bytes");
    switch (read_some(fd.fd, deadline, &chunk, &err)) {
      case ReadResult::kData: buf += chunk; break;
      case ReadResult::kEof: return fail(Failure::kClosed, buf.empty() ? "connection closed without a response" : "connection closed inside the response headers");
      case ReadResult::kTimeout: return fail(Failure::kTimeout, timeout_msg);
      case ReadResult::kError: return fail(Failure::kClosed, "reading the response: " + err);
    }
  }
  r.headers_done = true;

  // Body framing: none, Content-Length, chunked, or until the server closes.
  enum class Mode { kNone, kLength, kChunked, kClose } mode = Mode::kClose;
  uint64_t length_left = 0;
  const std::string te = lower(r.header("transfer-encoding"));
  const std::string cl = r.header("content-length");
  if (req.method == "HEAD" || r.status == 204 || r.status == 304) {
    mode = Mode::kNone;
  } else if (!te.empty()) {
    // Chunked only when it is the last coding; any other coding is delimited by the close.
    mode = te.size() >= 7 && te.compare(te.size() - 7, 7, "chunked") == 0 ? Mode::kChunked : Mode::kClose;
  } else if (!cl.empty()) {
    if (!all_digits(cl) || cl.size() > 18) return fail(Failure::kProtocol, "bad Content-Length '" + cl + "'");
    length_left = std::stoull(cl);
    mode = length_left ? Mode::kLength : Mode::kNone;
  }
  if (mode == Mode::kNone) return r;

  auto deliver = [&](std::string_view d) {
    if (d.empty()) return true;
    if (sink) {
      if (!sink(r, d)) {
        fail(Failure::kAborted, "stopped by the body callback");
        return false;
      }
      return true;
    }
    if (r.body.size() + d.size() > opt.max_body_bytes) {
      fail(Failure::kProtocol, "response body exceeds " + std::to_string(opt.max_body_bytes) + " bytes");
      return false;
    }
    r.body.append(d);
    return true;
  };
  ChunkedDecoder dechunk;
  std::string decoded;
  uint64_t received = 0;
  // Consumes body bytes: 1 complete, 0 wants more, -1 failed (r.failure set).
  auto consume = [&](std::string_view in) -> int {
    received += in.size();
    switch (mode) {
      case Mode::kLength: {
        const size_t n = (size_t)std::min<uint64_t>(in.size(), length_left);
        length_left -= n;
        if (!deliver(in.substr(0, n))) return -1;
        return length_left == 0 ? 1 : 0;
      }
      case Mode::kChunked:
        decoded.clear();
        if (!dechunk.feed(in, &decoded)) {
          fail(Failure::kProtocol, "bad chunked encoding: " + dechunk.error());
          return -1;
        }
        if (!deliver(decoded)) return -1;
        return dechunk.done() ? 1 : 0;
      default:
        return deliver(in) ? 0 : -1;
    }
  };
  int st = consume(std::string_view(buf).substr(end));
  while (st == 0) {
    switch (read_some(fd.fd, deadline, &chunk, &err)) {
      case ReadResult::kData: st = consume(chunk); break;
      case ReadResult::kEof:
        if (mode == Mode::kClose) return r;
        return fail(Failure::kClosed, mode == Mode::kLength
                                          ? "connection closed after " + std::to_string(received) + " of " + cl + " body bytes"
                                          : "connection closed before the last chunk");
      case ReadResult::kTimeout: return fail(Failure::kTimeout, timeout_msg);
      case ReadResult::kError: return fail(Failure::kClosed, "reading the response: " + err);
    }
  }
  return r;  // complete, or failed inside consume (r.failure set)
}

// ---- ChunkedDecoder ----

bool ChunkedDecoder::fail(std::string m) {
  state_ = State::kError;
  error_ = std::move(m);
  return false;
}

bool ChunkedDecoder::feed(std::string_view in, std::string* out) {
  if (state_ == State::kError) return false;
  size_t i = 0;
  while (i < in.size() && state_ != State::kDone) {
    if (state_ == State::kData) {
      const size_t n = (size_t)std::min<uint64_t>(left_, in.size() - i);
      out->append(in.substr(i, n));
      i += n;
      left_ -= n;
      if (left_ == 0) state_ = State::kDataEnd;
      continue;
    }
    // Size, data-end and trailer states read one line at a time.
    const char c = in[i++];
    if (c != '\n') {
      line_ += c;
      if (line_.size() > 4096) return fail("line longer than 4096 bytes");
      continue;
    }
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    const std::string line = std::move(line_);
    line_.clear();
    if (state_ == State::kDataEnd) {
      if (!line.empty()) return fail("chunk data longer than its size");
      state_ = State::kSize;
    } else if (state_ == State::kSize) {
      // "1a3f[;extension]" (hex, optional whitespace before the extension)
      uint64_t size = 0;
      size_t k = 0;
      for (; k < line.size() && std::isxdigit((unsigned char)line[k]); ++k) {
        if (k >= 15) return fail("chunk size too large");
        size = size * 16 + (uint64_t)(std::isdigit((unsigned char)line[k]) ? line[k] - '0' : std::tolower((unsigned char)line[k]) - 'a' + 10);
      }
      size_t rest = k;
      while (rest < line.size() && (line[rest] == ' ' || line[rest] == '\t')) ++rest;
      if (k == 0 || (rest < line.size() && line[rest] != ';'))
        return fail("bad chunk size line '" + line.substr(0, 40) + "'");
      if (size == 0) {
        state_ = State::kTrailer;
      } else {
        left_ = size;
        state_ = State::kData;
      }
    } else if (line.empty()) {  // kTrailer: a blank line ends the body
      state_ = State::kDone;
    }
  }
  return true;
}

// ---- SseParser ----

void SseParser::line(const OnEvent& on) {
  std::string_view l = line_;
  if (l.empty()) {  // blank line: dispatch
    if (has_data_) on(data_);
    data_.clear();
    has_data_ = false;
  } else if (l[0] != ':') {  // ':' starts a comment
    const size_t colon = l.find(':');
    std::string_view field = l.substr(0, colon), value;
    if (colon != std::string_view::npos) {
      value = l.substr(colon + 1);
      if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
    }
    if (field == "data") {
      if (has_data_) data_ += '\n';
      data_ += value;
      has_data_ = true;
    }
  }
  line_.clear();
}

bool SseParser::feed(std::string_view bytes, const OnEvent& on) {
  if (overflow_) return false;
  for (char c : bytes) {
    if (c == '\n' && after_cr_) {  // the \n of a \r\n pair: the line already ended at \r
      after_cr_ = false;
      continue;
    }
    after_cr_ = c == '\r';
    if (c == '\n' || c == '\r') {
      line(on);
      continue;
    }
    line_ += c;
    if (line_.size() > max_line) {
      overflow_ = true;
      return false;
    }
  }
  return true;
}

void SseParser::finish(const OnEvent& on) {
  if (overflow_) return;
  if (!line_.empty()) line(on);
  if (has_data_) on(data_);
  data_.clear();
  has_data_ = false;
}

}  // namespace ouro::http

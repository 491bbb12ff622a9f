// A small blocking HTTP/1.1 client over plain TCP (no TLS), for `ouro loadtest` and tests.
//
// One connection per request (`Connection: close`). The response body is framed by
// Content-Length, by `Transfer-Encoding: chunked`, or by the server closing the connection. A
// request either buffers the body into Response::body or hands it, as it arrives, to a callback,
// so that streamed (SSE) events can be timestamped; SseParser splits such a stream into events.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ouro::http {

// "http://host[:port][/prefix]". host may be a name, an IPv4 address or "[IPv6]".
struct Url {
  std::string host;    // without brackets for IPv6
  int port = 80;
  std::string prefix;  // path prefix without a trailing '/', "" for the root
  // "host:port" as the Host header writes it ("[::1]:8080" for IPv6).
  std::string authority() const;
};

// Parses an http:// URL; a usage error that says what is wrong otherwise (https, missing host,
// bad port, query strings, ...).
Expected<Url> parse_url(const std::string& s);

struct Request {
  std::string method = "GET";
  std::string path = "/";  // absolute path (the URL prefix is not added: callers join it)
  std::vector<std::pair<std::string, std::string>> headers;  // besides Host, Connection, Content-Length
  std::string body;
};

// Why a request did not produce a complete response.
enum class Failure {
  kNone,
  kConnect,   // could not resolve or connect (refused, unreachable, connect timeout)
  kTimeout,   // the request's deadline passed after connecting
  kClosed,    // the connection closed or reset before the response was complete
  kProtocol,  // the response is not valid HTTP/1.x (status line, headers, chunk framing)
  kAborted,   // the body callback asked to stop
};
const char* failure_name(Failure f);

struct Response {
  Failure failure = Failure::kNone;
  std::string error;  // what went wrong, when failure != kNone
  bool headers_done = false;  // true once the status line and headers were read
  int status = 0;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case, in order
  std::string body;  // the body when no callback was given
  bool ok() const { return failure == Failure::kNone; }
  // The first header of that (case-insensitive) name, or "" when absent.
  std::string header(std::string_view name) const;
};

struct Options {
  double connect_timeout_s = 10;
  double timeout_s = 60;               // the whole request: connect, send, and the full response
  size_t max_header_bytes = 64 << 10;  // status line + headers
  size_t max_body_bytes = 64 << 20;    // when buffering into Response::body
};

// Receives body bytes as they arrive (already de-chunked), after the headers were parsed into
// `head`. Returning false aborts the request (Failure::kAborted).
using BodySink = std::function<bool(const Response& head, std::string_view data)>;

// Sends `req` to url.host:url.port and reads the response. Never throws for network or protocol
// trouble: the outcome is in Response::failure. With a sink, Response::body stays empty.
Response request(const Url& url, const Request& req, const Options& opt = {}, const BodySink& sink = nullptr);

// Only connects (and closes): true when something listens at url.host:url.port.
bool can_connect(const Url& url, double timeout_s, std::string* error);

// Incremental decoder of a `Transfer-Encoding: chunked` body.
class ChunkedDecoder {
 public:
  // Consumes `in`, appending decoded bytes to *out. False on malformed framing (then error()).
  // Bytes after the final chunk and its trailers are ignored.
  bool feed(std::string_view in, std::string* out);
  bool done() const { return state_ == State::kDone; }
  const std::string& error() const { return error_; }

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer, kDone, kError };
  bool fail(std::string m);
  State state_ = State::kSize;
  std::string line_;    // the line being accumulated (size, data end, trailer)
  uint64_t left_ = 0;   // bytes left in the current chunk
  std::string error_;
};

// Splits a text/event-stream into events (the W3C EventSource rules, restricted to `data`):
// lines end in \n, \r\n or \r; `data:` lines (one optional space after the colon) accumulate,
// joined by '\n'; a blank line dispatches the event; comments (':') and other fields are ignored.
class SseParser {
 public:
  using OnEvent = std::function<void(const std::string& data)>;
  // Feeds bytes; calls `on` for each event completed by them. False once a line exceeds
  // max_line (the stream is then unusable).
  bool feed(std::string_view bytes, const OnEvent& on);
  // End of stream: a last event that lacks its blank line is dispatched too (lenient: the
  // standard drops it).
  void finish(const OnEvent& on);
  size_t max_line = 16 << 20;

 private:
  void line(const OnEvent& on);
  std::string line_, data_;
  bool has_data_ = false, after_cr_ = false, overflow_ = false;
};

}  // namespace ouro::http

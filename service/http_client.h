// service/http_client.h — a small blocking HTTP/1.1 client (Boost.Beast) for tapp-cli and tests.
//
// Owns: parsing "http://host:port" base URLs, one request per call with a
// deadline (connect + write + read), and sending raw bytes (tests of hostile
// input). No TLS, no redirects: it talks to a tapp-server.
// Thread safety: stateless functions; each call has its own connection.
#pragma once

#include <map>
#include <string>

#include "common/status.h"

namespace tapp::service {

struct ServerUrl {
  std::string host = "127.0.0.1";
  std::string port = "8080";
  std::string base_path;  // without a trailing slash
};
Result<ServerUrl> parse_server_url(const std::string& url);

struct HttpReply {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
};

Result<HttpReply> http_call(const ServerUrl& server, const std::string& method, const std::string& target,
                            const std::string& body = {}, const std::map<std::string, std::string>& headers = {},
                            double timeout_s = 30);

// Writes `bytes` as they are and reads until the server closes the connection;
// returns everything read (possibly empty), or an error when `timeout_s` passes first.
Result<std::string> raw_exchange(const std::string& host, int port, const std::string& bytes, double timeout_s = 10);

}  // namespace tapp::service

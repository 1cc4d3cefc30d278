// service/http_client.cpp — blocking Beast client (see http_client.h).
#include "service/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <chrono>

#include "common/host_port.h"

namespace tapp::service {
namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

Result<ServerUrl> parse_server_url(const std::string& url) {
  ServerUrl out;
  std::string rest = url;
  const std::string scheme = "http://";
  if (rest.rfind("https://", 0) == 0) return Status::error("--server: https is not supported, use http://host:port");
  if (rest.rfind(scheme, 0) == 0) rest = rest.substr(scheme.size());
  else if (const auto sep = rest.find("://"); sep != std::string::npos)
    return Status::error("--server: unknown scheme \"" + rest.substr(0, sep) + "\" in \"" + url +
                         "\" (expected http://host:port)");
  auto slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  if (slash != std::string::npos) out.base_path = rest.substr(slash);
  while (!out.base_path.empty() && out.base_path.back() == '/') out.base_path.pop_back();
  if (hostport.empty()) return Status::error("--server: expected http://host:port, got \"" + url + "\"");
  auto endpoint = parse_host_port(hostport, "--server", 80);
  if (!endpoint) return Status::error(endpoint.error_message() + " (expected http://host:port)");
  out.host = endpoint->host;
  out.port = std::to_string(endpoint->port);
  return out;
}

Result<HttpReply> http_call(const ServerUrl& server, const std::string& method, const std::string& target,
                            const std::string& body, const std::map<std::string, std::string>& headers,
                            double timeout_s) {
  try {
    net::io_context ioc;
    tcp::resolver resolver(ioc);
    beast::tcp_stream stream(ioc);
    auto deadline = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    auto endpoints = resolver.resolve(server.host, server.port);
    stream.expires_after(deadline);
    stream.connect(endpoints);
    http::request<http::string_body> req{http::string_to_verb(method), server.base_path + target, 11};
    if (req.method() == http::verb::unknown) req.method_string(method);
    req.set(http::field::host, server.host + ":" + server.port);
    req.set(http::field::user_agent, "tapp-cli");
    for (const auto& [k, v] : headers) req.set(k, v);
    if (!body.empty() || method == "POST") {
      req.body() = body;
      req.prepare_payload();
    }
    stream.expires_after(deadline);
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(256 * 1024 * 1024);
    http::read(stream, buffer, parser);
    auto res = parser.release();
    HttpReply reply;
    reply.status = static_cast<int>(res.result_int());
    reply.body = std::move(res.body());
    for (const auto& f : res) {
      std::string name(f.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      reply.headers[name] = std::string(f.value());
    }
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    return reply;
  } catch (const std::exception& e) {
    return Status::error("http " + method + " http://" + server.host + ":" + server.port + target + ": " + e.what());
  }
}

Result<std::string> raw_exchange(const std::string& host, int port, const std::string& bytes, double timeout_s) {
  try {
    net::io_context ioc;
    beast::tcp_stream stream(ioc);
    auto deadline = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    stream.expires_after(deadline);
    stream.connect(tcp::endpoint(net::ip::make_address(host), static_cast<unsigned short>(port)));
    stream.expires_after(deadline);
    beast::error_code ec;
    net::write(stream, net::buffer(bytes), ec);  // the server may close early (413, 431): keep reading
    std::string out;
    char buf[8192];
    for (;;) {
      std::size_t n = stream.read_some(net::buffer(buf), ec);
      out.append(buf, n);
      if (ec) break;
    }
    if (ec == beast::error::timeout) return Status::error("raw exchange: no answer within the deadline");
    return out;
  } catch (const std::exception& e) {
    return Status::error(std::string("raw exchange: ") + e.what());
  }
}

}  // namespace tapp::service

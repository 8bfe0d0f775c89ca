#pragma once

// An HTTP GET for tests of the metrics endpoints, on civetweb's client.

#include <civetweb.h>

#include <string>

#include "meshstore/internal/address.hpp"

namespace meshstore::testing {

struct HttpReply {
  int status = 0;  ///< 0 when no answer came (error says why)
  std::string body;
  std::string error;
};

// GET `path` from "HOST:PORT", waiting at most `timeout_ms` for the answer.
inline HttpReply http_get(const std::string& address, const std::string& path,
                          int timeout_ms = 10000) {
  HttpReply out;
  auto at = internal::parse_address(address);
  if (!at.ok()) {
    out.error = at.status().to_string();
    return out;
  }
  char why[256] = {0};
  mg_connection* conn = mg_connect_client(at->host.c_str(), at->port, 0, why, sizeof why);
  if (!conn) {
    out.error = std::string("connect: ") + why;
    return out;
  }
  mg_printf(conn, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path.c_str(), address.c_str());
  if (mg_get_response(conn, why, sizeof why, timeout_ms) < 0) {
    out.error = std::string("response: ") + why;
    mg_close_connection(conn);
    return out;
  }
  out.status = mg_get_response_info(conn)->status_code;
  char buf[8192];
  int n = 0;
  while ((n = mg_read(conn, buf, sizeof buf)) > 0)
    out.body.append(buf, static_cast<std::size_t>(n));
  mg_close_connection(conn);
  return out;
}

}  // namespace meshstore::testing

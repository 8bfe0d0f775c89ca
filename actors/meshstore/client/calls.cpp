// The put and get items the Store facade and the state-dict engine build often.

#include "meshstore/client/calls.hpp"

#include <utility>

namespace meshstore::client {

client::GetCall single_get(const std::string& op, client::GetMode mode, std::string key) {
  client::GetCall call;
  call.op = op;
  call.mode = mode;
  call.keys.push_back(std::move(key));
  return call;
}

client::PutItem bytes_item(std::string key, std::string bytes, wire::ObjectKind kind) {
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  TensorView view(const_cast<char*>(owned->data()), DType::uint8,
                  {static_cast<std::int64_t>(owned->size())});
  return client::PutItem{std::move(key), view, kind, std::move(owned)};
}

}  // namespace meshstore::client

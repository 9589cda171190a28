#include "wire/client.hpp"

namespace geotrain::wire {

std::optional<uint64_t> Client::send(Body body, std::vector<Frame> payloads) {
  const uint64_t id = next_id_++;
  Envelope env;
  env.frames.reserve(payloads.size() + 1);
  env.frames.push_back(encode_header(Header{id, std::move(body)}));
  for (auto& p : payloads) env.frames.push_back(std::move(p));
  if (!channel_->send(std::move(env))) return std::nullopt;
  return id;
}

bool Client::send_raw(std::vector<Frame> frames) {
  return channel_->send(Envelope{{}, std::move(frames)});
}

std::optional<Reply> Client::receive(std::chrono::milliseconds timeout) {
  auto env = channel_->receive(timeout);
  if (!env) return std::nullopt;
  Reply r{decode_header(env->frames.front()), {}};
  for (size_t i = 1; i < env->frames.size(); ++i) r.payloads.push_back(std::move(env->frames[i]));
  return r;
}

std::optional<Reply> Client::call(Body body, std::vector<Frame> payloads,
                                  std::chrono::milliseconds timeout) {
  auto id = send(std::move(body), std::move(payloads));
  if (!id) return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    auto r = receive(left);
    if (!r) return std::nullopt;
    if (r->header.request_id == *id) return r;
  }
}

}  // namespace geotrain::wire

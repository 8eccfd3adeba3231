#include "server/kv_events/zmq_publisher.h"

#include <spdlog/spdlog.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <iterator>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace ropeserve::kv_events {

namespace {

std::string BigEndian(std::int64_t value) {
  std::string bytes(8, '\0');
  auto u = static_cast<std::uint64_t>(value);
  for (int i = 7; i >= 0; --i, u >>= 8) bytes[static_cast<std::size_t>(i)] = static_cast<char>(u & 0xff);
  return bytes;
}

std::uint64_t FromBigEndian(const zmq::message_t& m) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < m.size(); ++i) v = (v << 8) | static_cast<const unsigned char*>(m.data())[i];
  return v;
}

}  // namespace

bool BindsEndpoint(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0;
}

struct ZmqPublisher::Impl {
  PublisherOptions options;
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  zmq::socket_t replay;  // ROUTER, when a replay endpoint is set

  std::mutex mu;
  std::condition_variable cv;
  std::deque<KvEventBatch> queue;  // guarded by mu
  bool stopping = false;           // guarded by mu
  std::atomic<std::uint64_t> published{0};
  std::atomic<std::uint64_t> dropped{0};
  std::thread thread;

  // The publisher thread's: the next sequence number and the batches a
  // replay may send.
  std::uint64_t next_seq = 0;
  std::deque<std::pair<std::uint64_t, std::string>> sent;

  void Loop();
  void Send(const KvEventBatch& batch);
  void ServeReplays();
};

void ZmqPublisher::Impl::Send(const KvEventBatch& batch) {
  std::string payload = EncodeBatch(batch, options.format);
  const std::uint64_t seq = next_seq++;
  const std::string seq_bytes = BigEndian(static_cast<std::int64_t>(seq));
  // PUB never blocks: past its high-water mark a slow subscriber loses
  // messages (and asks for a replay).
  pub.send(zmq::buffer(options.topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  pub.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  ++published;
  if (options.buffer_batches == 0) return;
  sent.emplace_back(seq, std::move(payload));
  while (sent.size() > options.buffer_batches) sent.pop_front();
}

void ZmqPublisher::Impl::ServeReplays() {
  if (!replay) return;
  for (;;) {
    std::vector<zmq::message_t> frames;
    zmq::recv_result_t got;
    try {
      got = zmq::recv_multipart(replay, std::back_inserter(frames), zmq::recv_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::warn("KV events: a replay request could not be read: {}", e.what());
      return;
    }
    if (!got) return;
    // [client, "", start seq (8 bytes)] from a REQ or DEALER client; anything
    // else gets the end marker alone, so a REQ client never waits.
    std::uint64_t start = next_seq;
    if (frames.size() == 3 && frames[1].size() == 0 && frames[2].size() == 8) start = FromBigEndian(frames[2]);
    const zmq::message_t& client = frames.front();
    auto reply = [&](const std::string& seq_bytes, const std::string& payload) {
      replay.send(zmq::buffer(client.data(), client.size()), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      replay.send(zmq::buffer(std::string_view()), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      replay.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      replay.send(zmq::buffer(payload), zmq::send_flags::dontwait);
    };
    for (const auto& [seq, payload] : sent)
      if (seq >= start) reply(BigEndian(static_cast<std::int64_t>(seq)), payload);
    reply(BigEndian(-1), std::string());
  }
}

void ZmqPublisher::Impl::Loop() {
  for (;;) {
    ServeReplays();
    std::deque<KvEventBatch> batches;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      // Replay requests are looked at every 10 ms while no batch comes.
      if (queue.empty() && !stopping) cv.wait_for(lock, std::chrono::milliseconds(10));
      batches.swap(queue);
      stop = stopping;
    }
    for (const KvEventBatch& b : batches) {
      try {
        Send(b);
      } catch (const std::exception& e) {
        spdlog::warn("KV events: a batch could not be sent: {}", e.what());
      }
    }
    if (stop) return;
  }
}

ZmqPublisher::ZmqPublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StatusOr<std::unique_ptr<ZmqPublisher>> ZmqPublisher::Start(PublisherOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  const PublisherOptions& o = impl->options;
  if (o.endpoint.empty()) return InvalidArgument("--kv-events-endpoint: empty");
  try {
    impl->pub.set(zmq::sockopt::sndhwm, o.send_high_water_mark);
    impl->pub.set(zmq::sockopt::linger, 1000);  // what is queued at exit still leaves, for a second
    if (BindsEndpoint(o.endpoint))
      impl->pub.bind(o.endpoint);
    else
      impl->pub.connect(o.endpoint);
  } catch (const zmq::error_t& e) {
    return InvalidArgument("--kv-events-endpoint " + o.endpoint + ": " + e.what());
  }
  if (!o.replay_endpoint.empty()) {
    try {
      impl->replay = zmq::socket_t(impl->context, zmq::socket_type::router);
      impl->replay.set(zmq::sockopt::linger, 0);
      impl->replay.set(zmq::sockopt::maxmsgsize,
                       std::int64_t{64});  // a request is 8 bytes: a larger frame drops its peer
      impl->replay.bind(o.replay_endpoint);
    } catch (const zmq::error_t& e) {
      return InvalidArgument("--kv-events-replay-endpoint " + o.replay_endpoint + ": " + e.what());
    }
  }
  Impl* raw = impl.get();
  raw->thread = std::thread([raw] { raw->Loop(); });
  return std::unique_ptr<ZmqPublisher>(new ZmqPublisher(std::move(impl)));
}

ZmqPublisher::~ZmqPublisher() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  impl_->thread.join();
}

void ZmqPublisher::Publish(KvEventBatch batch) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->queue.size() < impl_->options.max_queue_batches) {
      impl_->queue.push_back(std::move(batch));
      impl_->cv.notify_one();
      return;
    }
  }
  if (impl_->dropped++ % 1000 == 0)
    spdlog::warn("KV events: the publisher's queue is full ({} batches): {} batches dropped so far",
                 impl_->options.max_queue_batches, impl_->dropped.load());
}

std::uint64_t ZmqPublisher::published() const { return impl_->published; }
std::uint64_t ZmqPublisher::dropped() const { return impl_->dropped; }

}  // namespace ropeserve::kv_events

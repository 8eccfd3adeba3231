// serve --kv-events-endpoint: the KV cache events (server/engine/kv_events.h)
// published over ZeroMQ as vLLM's ZmqEventPublisher publishes them, so
// llm-d's precise prefix-cache scorer (and any vLLM subscriber) can follow
// the cache:
//  - a PUB socket sends each batch as three frames: the topic, the batch's
//    sequence number (8 bytes, big-endian, from 0 in each process), and the
//    batch (msgpack_batch.h). The endpoint is bound when it holds a '*' or
//    "::" or is ipc:// / inproc://, else connected (vLLM's rule: llm-d's
//    router binds and the model servers connect to it).
//  - an optional ROUTER socket (the replay endpoint, bound) answers a
//    subscriber that missed batches: it sends one frame, a starting
//    sequence number (8 bytes, big-endian), and receives every batch it
//    still holds from there as [seq, batch] messages, then [-1, empty].
//    It holds the last `buffer_batches`.
// The engine thread only queues a batch (Publish never waits); one thread
// of the publisher owns the sockets. If that queue is full (the publisher
// thread stalled), batches are dropped and counted, and the log says so: a
// subscriber then sees a gap no replay fills, as with vLLM when its queue
// overflows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "server/common/status.h"
#include "server/engine/kv_events.h"
#include "server/kv_events/msgpack_batch.h"

namespace ropeserve::kv_events {

struct PublisherOptions {
  std::string endpoint;         // e.g. tcp://*:5557 (bound) or tcp://router:5557 (connected)
  std::string replay_endpoint;  // "" = no replay socket
  std::string topic;            // the frame before each batch ("" = vLLM's default)
  std::size_t buffer_batches = 10000;
  std::size_t max_queue_batches = 100000;
  int send_high_water_mark = 100000;
  BatchFormat format;
};

class ZmqPublisher : public KvEventSink {
 public:
  // Binds or connects the sockets (an error names the endpoint) and starts
  // the publishing thread.
  static StatusOr<std::unique_ptr<ZmqPublisher>> Start(PublisherOptions options);
  ~ZmqPublisher() override;  // sends what is queued (up to a second), then closes
  ZmqPublisher(const ZmqPublisher&) = delete;
  ZmqPublisher& operator=(const ZmqPublisher&) = delete;

  void Publish(KvEventBatch batch) override;

  std::uint64_t published() const;  // batches sent
  std::uint64_t dropped() const;    // batches lost to a full queue

 private:
  struct Impl;
  explicit ZmqPublisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether vLLM's rule binds `endpoint` (else it is connected).
bool BindsEndpoint(const std::string& endpoint);

}  // namespace ropeserve::kv_events

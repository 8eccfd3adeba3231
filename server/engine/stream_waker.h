// Wakes the readers of request streams off the engine's thread. A step of
// N streaming requests leaves N API threads asleep on their streams, and
// waking each is a system call that may switch to the woken thread: done
// on the engine's thread, that is serial time in every step, 0.5 ms for 64
// sleeping readers and 3 ms for 256 on a 2-core VM (docs/benchmarks.md,
// "... readers woken off the engine's thread"), against a GPU step of a
// few milliseconds. The engine appends each step's output to the streams
// (RequestStream::Push(..., wake = false)), names them here, and hands the
// list over once a step; this class's one thread wakes them while the
// engine runs its next step (what vLLM's separate output processing buys it).
// A stream's data is in place before its wake is queued, so no output
// waits for more than the hand-over.
//
// Threading: Add and Flush on the engine's thread only; the destructor
// wakes what was handed over, then joins.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "server/engine/request_stream.h"

namespace ropeserve {

class StreamWaker {
 public:
  StreamWaker();
  ~StreamWaker();
  StreamWaker(const StreamWaker&) = delete;
  StreamWaker& operator=(const StreamWaker&) = delete;

  // Wake `stream`'s reader at the next Flush (a stream added twice in a row
  // is woken once).
  void Add(std::shared_ptr<RequestStream> stream);
  // Hands what Add collected to the waker's thread.
  void Flush();

 private:
  void Loop();

  std::vector<std::shared_ptr<RequestStream>> collected_;  // engine thread only
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<RequestStream>> handed_;  // guarded by mu_
  bool stop_ = false;                                   // guarded by mu_
  std::thread thread_;
};

}  // namespace ropeserve

#include "server/kv_events/msgpack_batch.h"

// msgpack-c's C++ packer, header-only; without Boost (its optional
// adaptors are not used).
#define MSGPACK_NO_BOOST
#include <msgpack.hpp>

namespace ropeserve::kv_events {

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void PackHashes(Packer& p, const std::vector<BlockHash>& hashes) {
  p.pack_array(static_cast<std::uint32_t>(hashes.size()));
  for (const BlockHash& h : hashes) p.pack_uint64(h.value);
}

void PackEvent(Packer& p, const KvEvent& e, const BatchFormat& format) {
  switch (e.kind) {
    case KvEvent::Kind::kBlockStored:
      p.pack_array(8);
      p.pack(std::string_view("BlockStored"));
      PackHashes(p, e.block_hashes);
      if (e.parent)
        p.pack_uint64(e.parent->value);
      else
        p.pack_nil();
      p.pack_array(static_cast<std::uint32_t>(e.token_ids.size()));
      for (TokenId t : e.token_ids) p.pack_int64(t);
      p.pack_int64(format.block_size);
      p.pack_nil();  // lora_id
      p.pack(e.offloaded ? format.offload_medium : format.medium);
      p.pack_nil();  // lora_name
      return;
    case KvEvent::Kind::kBlockRemoved:
      p.pack_array(3);
      p.pack(std::string_view("BlockRemoved"));
      PackHashes(p, e.block_hashes);
      p.pack(e.offloaded ? format.offload_medium : format.medium);
      return;
    case KvEvent::Kind::kAllBlocksCleared:
      p.pack_array(1);
      p.pack(std::string_view("AllBlocksCleared"));
      return;
  }
}

}  // namespace

std::string EncodeBatch(const KvEventBatch& batch, const BatchFormat& format) {
  msgpack::sbuffer buffer;
  Packer p(&buffer);
  p.pack_array(3);
  p.pack_double(batch.timestamp);
  p.pack_array(static_cast<std::uint32_t>(batch.events.size()));
  for (const KvEvent& e : batch.events) PackEvent(p, e, format);
  p.pack_int64(format.data_parallel_rank);
  return std::string(buffer.data(), buffer.size());
}

}  // namespace ropeserve::kv_events

#include "server/models/weight_loader.h"

#include <ATen/ATen.h>

#include <cstring>

namespace ropeserve {

c10::ScalarType ToScalarType(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return at::kDouble;
    case DType::kF32:
      return at::kFloat;
    case DType::kF16:
      return at::kHalf;
    case DType::kBF16:
      return at::kBFloat16;
    case DType::kI64:
      return at::kLong;
    case DType::kI32:
      return at::kInt;
    case DType::kI16:
      return at::kShort;
    case DType::kI8:
      return at::kChar;
    case DType::kU8:
      return at::kByte;
    case DType::kBool:
      return at::kBool;
  }
  return at::kFloat;
}

at::Tensor LoadTensor(const Checkpoint& ckpt, const std::string& name, c10::ScalarType dtype) {
  const Checkpoint::TensorRef* ref = ckpt.Find(name);
  TORCH_CHECK(ref != nullptr, "tensor not validated by Checkpoint::Open: ", name);
  const TensorInfo& info = *ref->info;
  // memcpy into a fresh (aligned) tensor: safetensors data need not be aligned.
  at::Tensor t = at::empty(info.shape, at::TensorOptions().dtype(ToScalarType(info.dtype)));
  std::memcpy(t.data_ptr(), ref->file->Data(info), info.end - info.begin);
  return t.scalar_type() == dtype ? t : t.to(dtype);
}

}  // namespace ropeserve

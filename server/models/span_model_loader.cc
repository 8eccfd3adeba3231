#include "server/models/span_model_loader.h"

#include <fstream>
#include <sstream>

#include "server/models/decoder.h"
#include "server/models/encoder_parts.h"
#include "server/models/modernbert.h"
#include "server/models/roformer.h"

namespace ropeserve {
namespace {

// A causal LM's trunk with its span head (DecoderModel::ForwardSpans).
// Its reference window (the dense forward on kernels/reference, Hugging
// Face's eager computation) is the tests' oracle and is not linked into the
// server: tests/models/reference_decoder.h.
class DecoderSpanModel final : public encoder::WindowedSpanModel {
 public:
  DecoderSpanModel(EncoderConfig config, std::unique_ptr<DecoderModel> decoder)
      : WindowedSpanModel(std::move(config)), decoder_(std::move(decoder)) {}

 protected:
  SpanLogits Window(const std::vector<TokenId>& ids, const std::vector<std::uint32_t>&, bool /*reference*/,
                    bool with_hidden) const override {
    return std::move(decoder_->ForwardSpans({encoder::ToInt64(ids)}, with_hidden)[0]);
  }
  Status ReferenceAvailable() const override {
    return Unimplemented(config().architecture +
                         ": the reference window of a decoder span model runs in the test suite only "
                         "(tests/models/reference_decoder.h); encode without --reference runs the serving path");
  }

 private:
  std::unique_ptr<DecoderModel> decoder_;
};

}  // namespace

StatusOr<std::unique_ptr<SpanModel>> LoadSpanModel(const std::string& dir, DType dtype, const std::string& device) {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    return InvalidArgument("span models compute in float32 or bfloat16");
  std::ifstream in(dir + "/config.json");
  if (!in) return NotFound(dir + "/config.json: cannot read");
  std::stringstream ss;
  ss << in.rdbuf();
  RS_ASSIGN_OR_RETURN(EncoderConfig config, ParseEncoderConfig(ss.str(), dir + "/config.json"));
  switch (config.family) {
    case EncoderFamily::kModernBert:
      return LoadModernBert(config, dir, dtype, device);
    case EncoderFamily::kRoFormer:
      return LoadRoFormer(config, dir, dtype, device);
    case EncoderFamily::kDecoder:
      break;
  }
  RS_ASSIGN_OR_RETURN(const at::Device d, encoder::ParseDevice(device));
  RS_ASSIGN_OR_RETURN(auto decoder, config.head == EncoderHead::kSpan ? DecoderModel::LoadSpanModel(dir, dtype, d)
                                    : config.head == EncoderHead::kSequence
                                        ? DecoderModel::LoadClassifier(dir, dtype, d)
                                        : DecoderModel::LoadTrunk(dir, dtype, d));
  return std::unique_ptr<SpanModel>(new DecoderSpanModel(std::move(config), std::move(decoder)));
}

}  // namespace ropeserve

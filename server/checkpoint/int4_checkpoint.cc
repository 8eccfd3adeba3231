#include "server/checkpoint/int4_checkpoint.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <regex>

#include "server/common/json_reader.h"

namespace ropeserve {

using json = nlohmann::json;

namespace {

// The decoder's projections, as the exporters name them inside a layer.
constexpr const char* kProjections[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                        "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

Status Refuse(const std::string& where, const std::string& field, const std::string& what) {
  return Unimplemented(where + ": '" + field + "' " + what);
}

Status CheckBits(const JsonReader<json>& r, const char* key) {
  RS_ASSIGN_OR_RETURN(std::int64_t bits, r.Int(key));
  if (bits != 4) return Refuse(r.where(), key, std::to_string(bits) + ": only 4-bit weights are supported");
  return Status::Ok();
}

Status CheckGroupSize(const std::string& where, const char* key, std::int64_t g) {
  if (g == -1 || g > 0) return Status::Ok();
  return InvalidArgument(where + ": '" + key + "' must be -1 (one group per row) or positive, got " +
                         std::to_string(g));
}

StatusOr<std::vector<std::string>> StringList(const JsonReader<json>& r, const char* key) {
  std::vector<std::string> out;
  const json* v = r.Find(key);
  if (v == nullptr) return out;
  if (!v->is_array()) return InvalidArgument(r.where() + ": '" + key + "' must be a list of strings");
  for (const auto& e : *v) {
    if (e.is_array()) {  // GPTQModel's modules_in_block_to_quantize: a list of lists
      for (const auto& f : e) {
        if (!f.is_string()) return InvalidArgument(r.where() + ": '" + key + "' must hold strings");
        out.push_back(f.get<std::string>());
      }
    } else if (e.is_string()) {
      out.push_back(e.get<std::string>());
    } else {
      return InvalidArgument(r.where() + ": '" + key + "' must hold strings");
    }
  }
  return out;
}

StatusOr<Int4Checkpoint> ParseGptq(const json& j, const std::string& where) {
  JsonReader<json> r(j, where);
  Int4Checkpoint q;
  q.format = Int4Format::kGptq;
  RS_RETURN_IF_ERROR(CheckBits(r, "bits"));
  RS_ASSIGN_OR_RETURN(q.group_size, r.Int("group_size", std::int64_t{128}));
  RS_RETURN_IF_ERROR(CheckGroupSize(where, "group_size", q.group_size));
  RS_ASSIGN_OR_RETURN(q.act_order, r.Bool("desc_act", false));
  RS_ASSIGN_OR_RETURN(q.symmetric, r.Bool("sym", true));
  // AutoGPTQ writes checkpoint_format, GPTQModel's newer versions format.
  const char* format_key = r.Has("checkpoint_format") ? "checkpoint_format" : "format";
  RS_ASSIGN_OR_RETURN(std::string format, r.String(format_key, std::string("gptq")));
  if (format == "gptq")
    q.zeros_minus_one = true;
  else if (format != "gptq_v2")
    return Refuse(where, format_key, "'" + format + "': only the gptq and gptq_v2 layouts are supported");
  RS_ASSIGN_OR_RETURN(bool lm_head, r.Bool("lm_head", false));
  if (lm_head) return Refuse(where, "lm_head", "true: a quantized LM head is not supported");
  if (const json* d = r.Find("dynamic"); d != nullptr && !(d->is_object() && d->empty()))
    return Refuse(where, "dynamic", "per-module overrides are not supported");
  if (r.Has("modules_in_block_to_quantize")) {
    RS_ASSIGN_OR_RETURN(auto listed, StringList(r, "modules_in_block_to_quantize"));
    for (const char* p : kProjections)
      if (std::find(listed.begin(), listed.end(), p) == listed.end())
        return Refuse(where, "modules_in_block_to_quantize",
                      std::string("leaves ") + p + " in floating point: every decoder projection must be 4-bit");
  }
  return q;
}

StatusOr<Int4Checkpoint> ParseAwq(const json& j, const std::string& where) {
  JsonReader<json> r(j, where);
  Int4Checkpoint q;
  q.format = Int4Format::kAwq;
  q.symmetric = false;
  // transformers' AwqConfig names them bits / group_size, AutoAWQ's own
  // quant_config w_bit / q_group_size.
  RS_RETURN_IF_ERROR(CheckBits(r, r.Has("bits") ? "bits" : "w_bit"));
  const char* group_key = r.Has("group_size") ? "group_size" : "q_group_size";
  RS_ASSIGN_OR_RETURN(q.group_size, r.Int(group_key, std::int64_t{128}));
  RS_RETURN_IF_ERROR(CheckGroupSize(where, group_key, q.group_size));
  RS_ASSIGN_OR_RETURN(bool zero_point, r.Bool("zero_point", true));
  if (!zero_point) return Refuse(where, "zero_point", "false: only AWQ weights with zero points are supported");
  RS_ASSIGN_OR_RETURN(std::string version, r.String("version", std::string("gemm")));
  std::transform(version.begin(), version.end(), version.begin(), [](unsigned char c) { return std::tolower(c); });
  if (version != "gemm")
    return Refuse(where, "version", "'" + version + "': only the GEMM packing is supported (gemv, exllama, ipex: no)");
  RS_ASSIGN_OR_RETURN(std::string backend, r.String("backend", std::string("autoawq")));
  if (backend != "autoawq") return Refuse(where, "backend", "'" + backend + "': only autoawq's packing is supported");
  RS_ASSIGN_OR_RETURN(q.not_converted, StringList(r, "modules_to_not_convert"));
  return q;
}

StatusOr<Int4Checkpoint> ParseCompressedTensors(const json& j, const std::string& where) {
  JsonReader<json> r(j, where);
  Int4Checkpoint q;
  q.format = Int4Format::kCompressedTensors;
  RS_ASSIGN_OR_RETURN(std::string status, r.String("quantization_status", std::string("compressed")));
  if (status != "compressed")
    return Refuse(where, "quantization_status", "'" + status + "': only compressed (packed) weights are supported");
  if (const json* s = r.Find("sparsity_config"); s != nullptr && s->is_object() && !s->empty()) {
    JsonReader<json> sr(*s, where + " sparsity_config");
    RS_ASSIGN_OR_RETURN(std::string f, sr.String("format", std::string("dense")));
    if (f != "dense") return Refuse(where, "sparsity_config", "format '" + f + "': sparse weights are not supported");
  }
  if (r.Has("kv_cache_scheme"))
    return Refuse(where, "kv_cache_scheme", "is set: a quantized KV cache is not supported");
  RS_ASSIGN_OR_RETURN(std::string format, r.String("format", std::string()));
  const json* groups = r.Find("config_groups");
  if (groups == nullptr || !groups->is_object() || groups->size() != 1)
    return Refuse(where, "config_groups", "must hold exactly one scheme (mixed schemes are not supported)");
  const std::string gwhere = where + " config_groups." + groups->begin().key();
  JsonReader<json> g(groups->begin().value(), gwhere);
  RS_ASSIGN_OR_RETURN(format, g.String("format", format));
  if (format != "pack-quantized")
    return Refuse(where, "format", "'" + format + "': only pack-quantized int4 weights are supported");
  RS_ASSIGN_OR_RETURN(auto targets, StringList(g, "targets"));
  if (std::find(targets.begin(), targets.end(), "Linear") == targets.end())
    return Refuse(gwhere, "targets", "must include \"Linear\" (every projection quantized)");
  for (const char* k : {"input_activations", "output_activations"})
    if (g.Has(k)) return Refuse(gwhere, k, "is set: only weight-only quantization (W4A16) is supported");
  const json* w = g.Find("weights");
  if (w == nullptr || !w->is_object()) return InvalidArgument(gwhere + ": 'weights' must be an object");
  JsonReader<json> wr(*w, gwhere + ".weights");
  RS_RETURN_IF_ERROR(CheckBits(wr, "num_bits"));
  RS_ASSIGN_OR_RETURN(std::string type, wr.String("type", std::string("int")));
  if (type != "int") return Refuse(wr.where(), "type", "'" + type + "': only integer weights are supported");
  RS_ASSIGN_OR_RETURN(bool dynamic, wr.Bool("dynamic", false));
  if (dynamic) return Refuse(wr.where(), "dynamic", "true: dynamic weight scales are not supported");
  if (wr.Has("block_structure")) return Refuse(wr.where(), "block_structure", "is set: block scales are not supported");
  RS_ASSIGN_OR_RETURN(std::string strategy, wr.String("strategy"));
  if (strategy == "group") {
    RS_ASSIGN_OR_RETURN(q.group_size, wr.Int("group_size"));
    if (q.group_size <= 0) return InvalidArgument(wr.where() + ": 'group_size' must be positive");
  } else if (strategy == "channel") {
    q.group_size = -1;
  } else {
    return Refuse(wr.where(), "strategy", "'" + strategy + "': only group and channel scales are supported");
  }
  RS_ASSIGN_OR_RETURN(q.symmetric, wr.Bool("symmetric", true));
  if (const json* a = wr.Find("actorder"); a != nullptr) {
    if (a->is_boolean())
      q.act_order = a->get<bool>();
    else if (a->is_string() && (*a == "group" || *a == "weight"))
      q.act_order = true;
    else
      return InvalidArgument(wr.where() + ": 'actorder' must be null, \"group\" or \"weight\"");
  }
  RS_ASSIGN_OR_RETURN(q.not_converted, StringList(r, "ignore"));
  for (const auto& e : q.not_converted) {
    if (e.rfind("re:", 0) != 0) continue;
    try {
      std::regex re(e.substr(3));
    } catch (const std::regex_error&) {
      return InvalidArgument(where + ": 'ignore' entry '" + e + "' is not a valid regular expression");
    }
  }
  return q;
}

}  // namespace

const char* Int4FormatName(Int4Format format) {
  switch (format) {
    case Int4Format::kGptq:
      return "gptq";
    case Int4Format::kAwq:
      return "awq";
    case Int4Format::kCompressedTensors:
      return "compressed-tensors";
  }
  return "?";
}

StatusOr<Int4Checkpoint> ParseInt4Checkpoint(const json& j, const std::string& source) {
  if (!j.is_object()) return InvalidArgument(source + ": 'quantization_config' must be an object");
  JsonReader<json> r(j, source);
  RS_ASSIGN_OR_RETURN(std::string method, r.String("quant_method"));
  if (method == "gptq") return ParseGptq(j, source);
  if (method == "awq") return ParseAwq(j, source);
  if (method == "compressed-tensors") return ParseCompressedTensors(j, source);
  return Refuse(source, "quant_method",
                "'" + method +
                    "' is not supported (supported: gptq, awq, compressed-tensors with 4-bit integer "
                    "weights; or serve a floating-point checkpoint with --quantization int4 / int8)");
}

bool Int4ModuleNotConverted(const Int4Checkpoint& q, const std::string& module) {
  for (const auto& e : q.not_converted) {
    if (q.format == Int4Format::kAwq) {
      // transformers' rule for modules_to_not_convert: a substring of the name.
      if (module.find(e) != std::string::npos) return true;
    } else if (e.rfind("re:", 0) == 0) {
      // compressed-tensors: Python's re.match, anchored at the start.
      if (std::regex_search(module, std::regex(e.substr(3)), std::regex_constants::match_continuous)) return true;
    } else if (e == module) {
      return true;
    }
  }
  return false;
}

Status CheckInt4Projection(const Int4Checkpoint& q, const std::string& module, std::int64_t n, std::int64_t k) {
  const std::int64_t g = q.Group(k);
  const std::string what = module + " [" + std::to_string(n) + ", " + std::to_string(k) + "]";
  if (k % g != 0)
    return Unimplemented(what + ": " + std::to_string(k) + " inputs are not a whole number of groups of " +
                         std::to_string(g));
  if (g % 32 != 0)
    return Unimplemented(what + ": groups of " + std::to_string(g) +
                         " columns: the int4 kernel needs a multiple of 32");
  if (q.format != Int4Format::kCompressedTensors && n % 8 != 0)
    return InvalidArgument(what + ": " + std::to_string(n) + " outputs do not pack 8 to an int32");
  return Status::Ok();
}

std::vector<TensorSpec> Int4TensorSpecs(const Int4Checkpoint& q, const std::string& m, std::int64_t n, std::int64_t k) {
  const std::int64_t groups = k / q.Group(k);
  const std::vector<DType> i32 = {DType::kI32}, index = {DType::kI32, DType::kI64};
  std::vector<TensorSpec> t;
  switch (q.format) {
    case Int4Format::kGptq:
      t.push_back({m + ".qweight", {k / 8, n}, i32});
      t.push_back({m + ".qzeros", {groups, n / 8}, i32});
      t.push_back({m + ".scales", {groups, n}});
      t.push_back({m + ".g_idx", {k}, index, !q.act_order});
      break;
    case Int4Format::kAwq:
      t.push_back({m + ".qweight", {k, n / 8}, i32});
      t.push_back({m + ".qzeros", {groups, n / 8}, i32});
      t.push_back({m + ".scales", {groups, n}});
      break;
    case Int4Format::kCompressedTensors:
      t.push_back({m + ".weight_packed", {n, (k + 7) / 8}, i32});
      t.push_back({m + ".weight_scale", {n, groups}});
      t.push_back({m + ".weight_shape", {2}, index});
      if (q.symmetric)  // older exporters wrote the (zero) points unpacked
        t.push_back({m + ".weight_zero_point", {n, groups}, {DType::kI8}, true});
      else
        t.push_back({m + ".weight_zero_point", {(n + 7) / 8, groups}, i32});
      if (q.act_order) t.push_back({m + ".weight_g_idx", {k}, index});
      break;
  }
  return t;
}

std::string Int4QuantizationConfigJson(const Int4Checkpoint& q) {
  nlohmann::ordered_json j;
  switch (q.format) {
    case Int4Format::kGptq:
      j = {{"quant_method", "gptq"},     {"bits", 4},
           {"group_size", q.group_size}, {"desc_act", q.act_order},
           {"sym", q.symmetric},         {"checkpoint_format", q.zeros_minus_one ? "gptq" : "gptq_v2"},
           {"damp_percent", 0.01},       {"true_sequential", true},
           {"static_groups", false},     {"lm_head", false}};
      break;
    case Int4Format::kAwq:
      j = {{"quant_method", "awq"},
           {"bits", 4},
           {"group_size", q.group_size},
           {"zero_point", true},
           {"version", "gemm"},
           {"backend", "autoawq"},
           {"modules_to_not_convert", nullptr}};
      break;
    case Int4Format::kCompressedTensors: {
      nlohmann::ordered_json w = {
          {"num_bits", 4},
          {"type", "int"},
          {"symmetric", q.symmetric},
          {"strategy", q.group_size < 0 ? "channel" : "group"},
          {"group_size", q.group_size < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(q.group_size)},
          {"actorder", q.act_order ? nlohmann::ordered_json("group") : nullptr},
          {"dynamic", false},
          {"observer", "minmax"},
          {"block_structure", nullptr}};
      j = {{"quant_method", "compressed-tensors"},
           {"format", "pack-quantized"},
           {"quantization_status", "compressed"},
           {"config_groups",
            {{"group_0",
              {{"targets", {"Linear"}},
               {"weights", w},
               {"input_activations", nullptr},
               {"output_activations", nullptr}}}}},
           {"ignore", {"lm_head"}},
           {"kv_cache_scheme", nullptr}};
      break;
    }
  }
  return j.dump();
}

}  // namespace ropeserve

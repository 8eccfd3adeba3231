#!/usr/bin/python3
"""Writes a Hugging Face decoder checkpoint (config.json, *.safetensors,
tokenizer.json) as a BF16 GGUF for llama.cpp, so that bench/vs_llamacpp.sh
can run llama.cpp on exactly the weights ropeserve benchmarks.

  PYTHONPATH=<llama.cpp>/gguf-py bench/gguf_from_checkpoint.py [--f32] MODEL_DIR OUT.gguf

--f32 keeps every tensor in float32 (parity checks:
scripts/llamacpp-embedding-golden). A trunk without its LM head
(Qwen3Model, LlamaModel: tensors without the "model." prefix) is written as
the causal LM's body; llama.cpp then reuses the embeddings as its output,
which embedding runs never read. A ModernBertModel is written as llama.cpp's
converter writes it (modern-bert: non-causal, GeGLU, its global/local
layer pattern and RoPE bases).

Why not llama.cpp's convert_hf_to_gguf.py: it needs torch and transformers,
which Debian does not package. This script needs only numpy (python3-numpy)
and gguf-py from the same llama.cpp tree, and covers the architectures
ropeserve's bench presets use (Qwen2, Llama, Qwen3). It follows the
converter's conventions: 2-D weights in BF16, 1-D tensors (norms, biases)
in F32, vocabulary padded to vocab_size with [PADn] tokens, no output.weight
when the embeddings are tied.
"""
import json
import struct
import sys
from pathlib import Path

import numpy as np
import gguf

ARCHES = {
    "qwen2": (gguf.MODEL_ARCH.QWEN2, "qwen2"),
    "llama": (gguf.MODEL_ARCH.LLAMA, "llama-bpe"),
    "qwen3": (gguf.MODEL_ARCH.QWEN3, "qwen2"),
    # The encoder (a sentence embedder's trunk): bidirectional, LayerNorm,
    # local (sliding-window) and global layers with their own RoPE bases.
    "modernbert": (gguf.MODEL_ARCH.MODERN_BERT, "default"),
}


def fail(message):
    sys.exit(f"gguf_from_checkpoint: {message}")


def read_safetensors(path):
    """Yields (name, dtype string, shape, raw bytes as a numpy view)."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    if data.size < 8:
        fail(f"{path}: too short for a safetensors file")
    (header_len,) = struct.unpack("<Q", bytes(data[:8]))
    if header_len > data.size - 8:
        fail(f"{path}: header length {header_len} past the end of the file")
    header = json.loads(bytes(data[8:8 + header_len]))
    base = 8 + header_len
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        yield name, info["dtype"], info["shape"], data[base + begin:base + end]


def to_bf16(dtype, raw, shape):
    if dtype == "BF16":
        return raw.view(np.uint16).reshape(shape)
    if dtype == "F32":
        bits = raw.view(np.uint32).reshape(shape).astype(np.uint64)
        # Round to nearest even, as torch's float -> bfloat16 conversion.
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return rounded.astype(np.uint16)
    fail(f"tensor dtype {dtype} not supported (BF16 or F32)")


def to_f32(dtype, raw, shape):
    if dtype == "F32":
        return np.array(raw.view(np.float32).reshape(shape))
    if dtype == "BF16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
    fail(f"tensor dtype {dtype} not supported (BF16 or F32)")


def add_vocab(writer, model_dir, vocab_size, pre):
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    model = tok.get("model", {})
    if model.get("type") != "BPE":
        fail("tokenizer.json: only byte-level BPE tokenizers are written")
    by_id = {i: t for t, i in model["vocab"].items()}
    special = set()
    for added in tok.get("added_tokens", []):
        by_id[added["id"]] = added["content"]
        if added.get("special"):
            special.add(added["id"])
    tokens, types = [], []
    for i in range(vocab_size):
        if i in by_id:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)


def main():
    args = sys.argv[1:]
    f32 = "--f32" in args
    args = [a for a in args if a != "--f32"]
    if len(args) != 2:
        fail("usage: gguf_from_checkpoint.py [--f32] MODEL_DIR OUT.gguf")
    model_dir, out = Path(args[0]), Path(args[1])
    config = json.loads((model_dir / "config.json").read_text())
    model_type = config.get("model_type")
    if model_type not in ARCHES:
        fail(f"model_type {model_type!r} not supported ({', '.join(ARCHES)})")
    arch, pre = ARCHES[model_type]
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])

    writer = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[arch])
    writer.add_name(model_dir.name)
    writer.add_context_length(int(config.get("max_position_embeddings", 4096)))
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(heads)
    writer.add_head_count_kv(int(config.get("num_key_value_heads", heads)))
    if "head_dim" in config:
        writer.add_key_length(int(config["head_dim"]))
        writer.add_value_length(int(config["head_dim"]))
    if model_type == "modernbert":
        every = int(config.get("global_attn_every_n_layers", 1))
        writer.add_causal_attention(False)
        writer.add_layer_norm_eps(float(config.get("norm_eps", 1e-5)))
        writer.add_rope_freq_base(float(config.get("global_rope_theta", 160000.0)))
        writer.add_rope_freq_base_swa(float(config.get("local_rope_theta", 10000.0)))
        writer.add_sliding_window(int(config.get("local_attention", 128)))
        writer.add_sliding_window_pattern([i % every != 0 for i in range(layers)])  # true: local
        writer.add_hidden_act(str(config.get("hidden_activation", "gelu")))
        writer.add_rope_scaling_type(gguf.RopeScalingType.NONE)
        if config.get("norm_bias"):
            fail("modernbert: norm_bias true is not written (llama.cpp's ModernBERT has no norm biases)")
    else:
        writer.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
        writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if f32 else gguf.LlamaFileType.MOSTLY_BF16)
    add_vocab(writer, model_dir, int(config["vocab_size"]), pre)
    if config.get("eos_token_id") is not None:
        writer.add_eos_token_id(int(config["eos_token_id"]))

    names = gguf.get_tensor_name_map(arch, layers)
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        fail(f"{model_dir}: no *.safetensors")
    for path in files:
        for name, dtype, shape, raw in read_safetensors(path):
            if name == "lm_head.weight" and config.get("tie_word_embeddings"):
                continue
            if model_type == "modernbert":
                name = name.removeprefix("model.")  # a classifier's trunk, as the converter strips it
            elif name != "lm_head.weight" and not name.startswith("model."):
                name = "model." + name  # a trunk's tensors (Qwen3Model)
            new_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
            if new_name is None:
                fail(f"{path.name}: no GGUF name for tensor {name}")
            if len(shape) == 1 or f32:
                writer.add_tensor(new_name, to_f32(dtype, raw, shape))
            else:
                writer.add_tensor(new_name, to_bf16(dtype, raw, shape),
                                  raw_dtype=gguf.GGMLQuantizationType.BF16)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()

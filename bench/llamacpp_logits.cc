// Not part of ropeserve: a helper of bench/vs_llamacpp.sh, compiled there
// against the llama.cpp tree it is given (LLAMA_CPP_DIR/include and its
// libllama), to measure llama.cpp's own quantization error on the same
// prompt as ropeserve's (docs/benchmarks.md): it feeds token ids to a GGUF
// in one batch, every position's logits requested, and writes them as
// float32 [positions, vocab] to stdout (ids past the vocabulary refused).
//
//   llamacpp_logits MODEL.gguf THREADS ID[,ID...] > logits.f32
#include <llama.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf THREADS ID[,ID...]\n", argv[0]);
    return 2;
  }
  std::vector<llama_token> ids;
  std::stringstream list(argv[3]);
  for (std::string item; std::getline(list, item, ',');) {
    char* end = nullptr;
    const long id = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || id < 0) {
      std::fprintf(stderr, "not a token id: '%s'\n", item.c_str());
      return 2;
    }
    ids.push_back(static_cast<llama_token>(id));
  }
  const int threads = std::atoi(argv[2]);
  if (ids.empty() || ids.size() > 4096 || threads < 1) {
    std::fprintf(stderr, "1-4096 ids and THREADS >= 1\n");
    return 2;
  }
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == nullptr) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  for (llama_token id : ids) {
    if (id >= vocab) {
      std::fprintf(stderr, "token id %d is past the vocabulary (%d)\n", id, vocab);
      return 2;
    }
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(ids.size());
  cp.n_threads = cp.n_threads_batch = threads;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) return 1;
  llama_batch batch = llama_batch_init(static_cast<int32_t>(ids.size()), 0, 1);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    batch.token[i] = ids[i];
    batch.pos[i] = static_cast<llama_pos>(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = static_cast<int32_t>(ids.size());
  if (llama_decode(ctx, batch) != 0) {
    std::fprintf(stderr, "llama_decode failed\n");
    return 1;
  }
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const float* row = llama_get_logits_ith(ctx, static_cast<int32_t>(i));
    if (row == nullptr || std::fwrite(row, sizeof(float), vocab, stdout) != static_cast<std::size_t>(vocab)) return 1;
  }
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}

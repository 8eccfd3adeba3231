#!/usr/bin/env python3
"""Parity with Hugging Face transformers, for a machine that has it (the GPU
machine; run by scripts/gpu-check). Random checkpoints are written with
transformers' own save_pretrained, then run through `ropeserve` and through
transformers on the same inputs:

  decoders (Qwen2ForCausalLM, LlamaForCausalLM), float32 and bfloat16:
    greedy tokens of `ropeserve generate --prompt-ids ... --json` equal
    transformers' greedy continuation; top-5 logprobs of every step within
    a tolerance of transformers' log_softmax.
  span models (ModernBertForQuestionAnswering, RoFormerForQuestionAnswering,
    LlamaForQuestionAnswering, Qwen2ForQuestionAnswering), float32:
    `ropeserve encode --input-ids ... --json` start/end logits and
    last_hidden_state against the model's forward.

Prints one line per check ("PASS name ..." / "FAIL name ...") and exits 1 if
any failed. transformers runs on the GPU when there is one (cuda), else on
the CPU; ropeserve runs its CPU path, and with a GPU its CUDA decoder too
(`generate --device cuda`, bfloat16) and the ModernBERT / RoFormer span
models on the GPU (`encode --device cuda`, float32).
"""
import argparse
import json
import subprocess
import sys
import tempfile

import torch
import transformers as tf

FAILED = []


def report(name, ok, detail):
    print(f"{'PASS' if ok else 'FAIL'} {name} {detail}", flush=True)
    if not ok:
        FAILED.append(name)


def run(binary, *args):
    p = subprocess.run([binary, *args], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])}: exit {p.returncode}: {p.stderr[-2000:]}")
    return json.loads(p.stdout)


def device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def decoder_checks(binary, arch, dtype_name, worker="cpu"):
    torch.manual_seed(1234)
    common = dict(vocab_size=512, hidden_size=128, intermediate_size=352, num_hidden_layers=3,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024,
                  rms_norm_eps=1e-6, tie_word_embeddings=False)
    if arch == "qwen2":
        config = tf.Qwen2Config(**common, rope_theta=1000000.0, use_sliding_window=False)
        model = tf.Qwen2ForCausalLM(config)
    else:
        config = tf.LlamaConfig(**common, rope_theta=500000.0)
        model = tf.LlamaForCausalLM(config)
    # Wider weights than the initializer so the logits are not flat.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3 if p.shape[0] == 512 else 0.08)
    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    model = model.to(dtype)
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d, safe_serialization=True)
        prompt = [int(x) for x in torch.randint(0, 500, (23,))]
        steps = 12
        ours = run(binary, "generate", "--model", d, "--prompt-ids", ",".join(map(str, prompt)), "--max-tokens",
                   str(steps), "--ignore-eos", "--top-logprobs", "5", "--dtype", dtype_name, "--device", worker,
                   "--json")
        name = f"decoder {arch} {dtype_name} on {worker}"
        if dtype_name == "f32":
            model = model.to(device()).eval()
            ids = torch.tensor([prompt], device=device())
            with torch.no_grad():
                theirs = model.generate(ids, max_new_tokens=steps, do_sample=False, min_new_tokens=steps,
                                        pad_token_id=0, eos_token_id=None)[0, len(prompt):].tolist()
                logits = model(torch.tensor([prompt + ours["generated_ids"]], device=device())).logits[0].float()
            report(name + " greedy", ours["generated_ids"] == theirs, f"ours={ours['generated_ids']} hf={theirs}")
            logp = torch.log_softmax(logits, -1)
            worst = max_deviation(logp, our_top(ours), len(prompt))
            report(name + " top-5 logprobs", worst <= 1e-3, f"max |diff| {worst:.2e} (tolerance 1e-3)")
            return
        # bfloat16: the reference is the exact maths on the same (bf16)
        # weights, i.e. transformers' forward in float32 of the bf16 model;
        # transformers' own bf16 forward rounds every activation and drifts
        # from it by an amount these random weights make large. Ours must be
        # about as close to the exact maths as transformers' bf16 is (within
        # 2x its deviation, measured here on the same tokens), and each
        # greedy token must be the exact maths' argmax or within that
        # deviation of it (teacher-forced on our tokens, so a near-tie taken
        # the other way does not cascade).
        ids = torch.tensor([prompt + ours["generated_ids"]], device=device())
        model = model.to(device()).eval()
        with torch.no_grad():
            theirs_bf16 = torch.log_softmax(model(ids).logits[0].float(), -1)
            model = model.float()
            ref = torch.log_softmax(model(ids).logits[0].float(), -1)
        hf_top = [[(i, float(row[i])) for i in torch.topk(row, 5).indices.tolist()]
                  for row in theirs_bf16[len(prompt) - 1:len(prompt) - 1 + steps]]
        hf_dev = max_deviation(ref, hf_top, len(prompt))
        tol = max(2.0 * hf_dev, 1e-3)
        worst = max_deviation(ref, our_top(ours), len(prompt))
        report(name + " top-5 logprobs vs exact maths", worst <= tol,
               f"max |diff| {worst:.2e}; transformers bf16 {hf_dev:.2e} (tolerance 2x that)")
        gaps = []
        for step, token in enumerate(ours["generated_ids"]):
            row = ref[len(prompt) - 1 + step]
            gaps.append(float(row.max() - row[token]))
        report(name + " greedy (argmax of the exact maths, ties within tolerance)", max(gaps) <= tol,
               f"largest gap to the argmax {max(gaps):.2e}; {sum(g > 0 for g in gaps)} of {steps} steps not the argmax")


def our_top(ours):
    """`generate --json`'s top logprobs as (id, logprob) pairs per step."""
    return [[(item["id"], item["logprob"]) for item in items] for items in ours["top_logprobs"]]


def max_deviation(ref, top, prompt_len):
    """Largest |ref - value| over each step's (id, logprob) pairs in `top`,
    step k against ref's row prompt_len - 1 + k (the row that predicts it)."""
    worst = 0.0
    for step, pairs in enumerate(top):
        row = ref[prompt_len - 1 + step]
        for i, value in pairs:
            worst = max(worst, abs(float(row[i]) - value))
    return worst


def span_model(arch):
    torch.manual_seed(99)
    if arch == "modernbert":
        config = tf.ModernBertConfig(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                                     num_attention_heads=4, max_position_embeddings=512, global_attn_every_n_layers=3,
                                     local_attention=16, pad_token_id=509, cls_token_id=510, sep_token_id=511,
                                     num_labels=2)
        return tf.ModernBertForQuestionAnswering(config)
    if arch == "roformer":
        config = tf.RoFormerConfig(vocab_size=512, embedding_size=64, hidden_size=64, intermediate_size=96,
                                   num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=512,
                                   type_vocab_size=2, num_labels=2)
        return tf.RoFormerForQuestionAnswering(config)
    common = dict(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, num_labels=2)
    if arch == "llama":
        return tf.LlamaForQuestionAnswering(tf.LlamaConfig(**common))
    return tf.Qwen2ForQuestionAnswering(tf.Qwen2Config(**common, use_sliding_window=False))


def span_checks(binary, arch, worker="cpu"):
    model = span_model(arch).float().eval()
    with torch.no_grad():
        # Not RoFormer's sinusoidal position table: a fixed function of the
        # config, which ropeserve computes rather than reads.
        for name, p in model.named_parameters():
            if p.dim() == 2 and "embed_positions" not in name:
                p.normal_(0, 0.1)
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d, safe_serialization=True)
        ids = [int(x) for x in torch.randint(0, 500, (37,))]
        types = [0] * 15 + [1] * 22
        args = ["encode", "--model", d, "--input-ids", ",".join(map(str, ids)), "--device", worker, "--json"]
        if arch == "roformer":
            args += ["--token-type-ids", ",".join(map(str, types))]
        ours = run(binary, *args)
        model = model.to(device())
        kwargs = dict(input_ids=torch.tensor([ids], device=device()))
        if arch == "roformer":
            kwargs["token_type_ids"] = torch.tensor([types], device=device())
        with torch.no_grad():
            out = model(**kwargs)
        # The base model's last_hidden_state (ModernBERT: after final_norm;
        # the decoders: after their final norm; RoFormer: the last layer).
        with torch.no_grad():
            hidden = model.base_model(**{k: v for k, v in kwargs.items() if k != "output_hidden_states"})[0][0]
        for key, ref in (("start_logits", out.start_logits[0]), ("end_logits", out.end_logits[0]),
                         ("last_hidden_state", hidden)):
            diff = (torch.tensor(ours[key]) - ref.float().cpu()).abs().max().item()
            report(f"span {arch} {key} on {worker}", diff <= 1e-3, f"max |diff| {diff:.2e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    a = ap.parse_args()
    print(f"transformers {tf.__version__}, torch {torch.__version__}, device {device()}", flush=True)
    for arch in ("qwen2", "llama"):
        for dtype_name in ("f32", "bf16"):
            # The CUDA decoder (16-bit only) beside the CPU one.
            for worker in ["cpu"] + (["cuda"] if dtype_name == "bf16" and device() == "cuda" else []):
                try:
                    decoder_checks(a.binary, arch, dtype_name, worker)
                except Exception as e:  # one broken check must not hide the others
                    report(f"decoder {arch} {dtype_name} on {worker}", False, f"error: {e}")
    for arch in ("modernbert", "roformer", "llama", "qwen2"):
        # The encoders also on the GPU (float32; a decoder trunk there is 16-bit only).
        for worker in ["cpu"] + (["cuda"] if arch in ("modernbert", "roformer") and device() == "cuda" else []):
            try:
                span_checks(a.binary, arch, worker)
            except Exception as e:
                report(f"span {arch} on {worker}", False, f"error: {e}")
    print(f"{len(FAILED)} failed" if FAILED else "all passed", flush=True)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())

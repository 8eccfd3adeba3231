#!/usr/bin/env python3
"""Worked values for tests/checkpoint/rope_test.cc.

Re-derives the RoPE inverse frequencies of each rope type with the formulas of
Hugging Face transformers' modeling_rope_utils.py (transcribed by hand into
plain Python floats; no torch, no ropeserve code), so the C++ implementation
is checked against an independent derivation. Run: python3 rope_expected.py
"""
import math


def default(base, dim):
    return [1.0 / base ** (i / dim) for i in range(0, dim, 2)]


def llama3(base, dim, factor, low, high, old_ctx):
    inv = default(base, dim)
    lw, hw = old_ctx / low, old_ctx / high
    out = []
    for f in inv:
        w = 2 * math.pi / f
        g = f / factor if w > lw else f
        if not (w < hw) and not (w > lw):
            s = (old_ctx / w - low) / (high - low)
            g = (1 - s) * g / factor + s * g
        out.append(g)
    return out


def yarn(base, dim, factor, orig, beta_fast=32, beta_slow=1, mscale=None, mscale_all_dim=None, truncate=True):
    def get_mscale(scale, m=1):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if mscale and mscale_all_dim:
        af = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
    else:
        af = get_mscale(factor)

    def corr(rot):
        return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

    lo, hi = corr(beta_fast), corr(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if lo == hi:
        hi += 0.001
    pos = [base ** (i / dim) for i in range(0, dim, 2)]
    out = []
    for i, p in enumerate(pos):
        ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)
        ext = 1 - ramp
        out.append((1 / (factor * p)) * (1 - ext) + (1 / p) * ext)
    return out, af


def dynamic(base, dim, factor, max_pos, seq_len):
    seq_len = max(seq_len, max_pos)
    b = base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    return default(b, dim)


def show(name, vals, idx):
    print(name, ", ".join("%.17g" % vals[i] for i in idx))


idx = [0, 1, 10, 20, 30, 40, 50, 63]
show("llama3(500000,128,8,1,4,8192)", llama3(500000.0, 128, 8.0, 1.0, 4.0, 8192), idx)
v, af = yarn(1000000.0, 128, 4.0, 32768)
show("yarn(1e6,128,4,32768)", v, idx)
print("yarn af", "%.17g" % af)
v, af = yarn(10000.0, 64, 40.0, 4096, mscale=0.707, mscale_all_dim=0.707)
print("yarn mscale af", "%.17g" % af)
v, af = yarn(10000.0, 64, 40.0, 4096, mscale=1.0, mscale_all_dim=0.5)
print("yarn mscale2 af", "%.17g" % af)
show("yarn(1e4,64,40,4096,m)", v, [0, 5, 10, 15, 20, 31])
show("dynamic(1e4,64,2,2048,4096)", dynamic(10000.0, 64, 2.0, 2048, 4096), [0, 1, 10, 31])
show("dynamic(1e4,64,2,2048,1000)", dynamic(10000.0, 64, 2.0, 2048, 1000), [0, 1, 10, 31])

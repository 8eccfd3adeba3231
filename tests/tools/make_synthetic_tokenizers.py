#!/usr/bin/python3
"""Writes small tokenizer.json files that exercise the pipeline components
the real tokenizers in tests/data do not (WordPiece, Unigram, WordLevel,
BERT normalizer/pre-tokenizer, Metaspace, RoBERTa/BERT processing, ...).

Vocabularies are derived deterministically from the reference corpus
(tests/data/golden/tokenizer_corpus.json). Golden outputs for these files
are then produced by the Hugging Face tokenizers library with
tests/tools/make_tokenizer_golden.js; this script only writes inputs.

  /usr/bin/python3 tests/tools/make_synthetic_tokenizers.py tests/data
"""
import collections, json, math, os, re, sys, unicodedata

data = sys.argv[1]
corpus = [i["text"] for i in json.load(open(os.path.join(data, "golden/tokenizer_corpus.json")))["items"]]
words = collections.Counter(w.lower() for t in corpus for w in re.findall(r"\w+|[^\w\s]", t))
chars = sorted({c for t in corpus for c in t.lower() if not c.isspace()})
frequent = [w for w, n in words.most_common() if n >= 2 and len(w) > 1][:300]
suffixes = ["ing", "ed", "s", "er", "ly", "tion", "able", "es", "est", "ment"]

def write(name, tok):
    d = os.path.join(data, "tokenizers/synthetic", name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)

def added(content, id, special=True, **kw):
    a = {"id": id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": special}
    a.update(kw)
    return a

# --- BERT: WordPiece, BertNormalizer (lowercase, accents, CJK), [CLS]/[SEP]
specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
vocab = {}
for t in specials + chars + ["##" + c for c in chars] + frequent + ["##" + s for s in suffixes]:
    if unicodedata.normalize("NFD", t) != t or any(unicodedata.category(c) == "Mn" for c in t):
        continue
    vocab.setdefault(t, len(vocab))
write("bert", {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [added(s, vocab[s]) for s in specials],
    "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                   "strip_accents": None, "lowercase": True},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                  {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                       "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                                {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
                       "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [vocab["[CLS]"]], "tokens": ["[CLS]"]},
                                          "[SEP]": {"id": "[SEP]", "ids": [vocab["[SEP]"]], "tokens": ["[SEP]"]}}},
    "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": 100, "vocab": vocab}})

# --- BERT-cased variant: BertProcessing, StripAccents via sequence, no CJK handling
write("bert_processing", {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [added(s, vocab[s]) for s in specials],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}, {"type": "Lowercase"},
                                                        {"type": "Strip", "strip_left": True, "strip_right": True}]},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Punctuation", "behavior": "Isolated"},
                                                             {"type": "Digits", "individual_digits": True}]},
    "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", vocab["[SEP]"]], "cls": ["[CLS]", vocab["[CLS]"]]},
    "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": False},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": 12, "vocab": vocab}})

# --- Unigram (T5/ALBERT family): Metaspace, NFKC, byte fallback off, unk fused
pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
seen = set(p for p, _ in pieces)
total = sum(words.values())
for w, n in words.most_common(400):
    for cand in ("\u2581" + w, w):
        if cand not in seen:
            seen.add(cand)
            pieces.append((cand, math.log(n / total) - (0 if cand.startswith("\u2581") else 1.5)))
for c in chars[:-40]:  # leave some characters out: they become <unk>
    if c not in seen:
        seen.add(c)
        pieces.append((c, -12.0 - (ord(c) % 7) * 0.1))
if "\u2581" not in seen:
    pieces.append(("\u2581", -3.0))
write("unigram", {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [added("<pad>", 0), added("</s>", 1), added("<unk>", 2)],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                       "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}},
                                {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                       "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}},
    "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
    "model": {"type": "Unigram", "unk_id": 2, "vocab": [[p, s] for p, s in pieces], "byte_fallback": False}})

# --- RoBERTa style: byte-level BPE (GPT-2 regex), RobertaProcessing with trim_offsets,
# an lstrip <mask> and a single_word added token. Merges from frequent words.
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}
b2u = bytes_to_unicode()
bl_vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
for b in range(256):
    bl_vocab.setdefault(b2u[b], len(bl_vocab))
merges = []
def add_word(w):
    sym = [b2u[b] for b in w.encode()]
    while len(sym) > 1:
        a, b = sym[0], sym[1]
        m = a + b
        if m not in bl_vocab:
            bl_vocab[m] = len(bl_vocab); merges.append([a, b])
        sym = [m] + sym[2:]
for w in frequent[:200]:
    add_word(w); add_word(" " + w)
bl_vocab["<mask>"] = len(bl_vocab)
bl_vocab["ropeserve"] = len(bl_vocab)
write("roberta", {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [added("<s>", 0), added("<pad>", 1), added("</s>", 2), added("<unk>", 3),
                     added("<mask>", bl_vocab["<mask>"], lstrip=True),
                     added("ropeserve", bl_vocab["ropeserve"], special=False, single_word=True, normalized=True)],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0], "trim_offsets": True, "add_prefix_space": False},
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
              "fuse_unk": False, "byte_fallback": False, "vocab": bl_vocab, "merges": merges}})

# --- WordLevel with Whitespace pre-tokenizer and a BPE-style suffix decoder
wl = {"[UNK]": 0}
for w in frequent:
    wl.setdefault(w, len(wl))
write("wordlevel", {
    "version": "1.0", "truncation": None, "padding": None, "added_tokens": [added("[UNK]", 0)],
    "normalizer": {"type": "Lowercase"},
    "pre_tokenizer": {"type": "Whitespace"},
    "post_processor": None,
    "decoder": None,
    "model": {"type": "WordLevel", "vocab": wl, "unk_token": "[UNK]"}})
print("wrote", ", ".join(sorted(os.listdir(os.path.join(data, "tokenizers/synthetic")))))

"""Independent references for the tokenizer tests (tokenizer_test.cc).

  tokenizer_reference.py pretok TEXT_FILE OUT_JSON
      GPT-2's pre-tokenization of an ASCII text with Python's re (for ASCII, \\p{L} is
      [A-Za-z] and \\p{N} is [0-9]): the pieces' byte lengths.
  tokenizer_reference.py bpe TEXT_FILE MERGES DIR
      Learns MERGES byte-level BPE merges on the text (most frequent pair first, ties to
      the first seen), writes DIR/vocab.json, DIR/merges.txt and DIR/ids.json: the text
      encoded as OpenAI's GPT-2 encoder does (lowest-ranked pair first).
  tokenizer_reference.py spm TEXT_FILE VOCAB DIR
      Trains a SentencePiece BPE model with byte fallback (DIR/sp.model) and writes the
      text's ids (DIR/ids.json) as python3-sentencepiece encodes it.
"""
import json
import re
import sys

PATTERN = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def pieces(text):
    return PATTERN.findall(text)


def encode_word(word, ranks):
    symbols = list(word)
    while len(symbols) > 1:
        pairs = [(ranks.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(symbols, symbols[1:]))]
        best = min(pairs)[0]
        if best == 1 << 30:
            break
        first, second = [p for p in ranks if ranks[p] == best][0]
        out, i = [], 0
        while i < len(symbols):
            if i + 1 < len(symbols) and symbols[i] == first and symbols[i + 1] == second:
                out.append(first + second)
                i += 2
            else:
                out.append(symbols[i])
                i += 1
        symbols = out
    return symbols


def main():
    mode, text_file = sys.argv[1], sys.argv[2]
    text = open(text_file, encoding="utf-8").read()
    if mode == "pretok":
        json.dump([len(p.encode("utf-8")) for p in pieces(text)], open(sys.argv[3], "w"))
        return
    if mode == "spm":
        import sentencepiece as spm
        vocab, folder = int(sys.argv[3]), sys.argv[4]
        spm.SentencePieceTrainer.train(input=text_file, model_prefix=folder + "/sp", vocab_size=vocab,
                                       model_type="bpe", byte_fallback=True, character_coverage=1.0,
                                       minloglevel=2)
        sp = spm.SentencePieceProcessor(model_file=folder + "/sp.model")
        json.dump(sp.encode(text), open(folder + "/ids.json", "w"))
        return
    merges_wanted, folder = int(sys.argv[3]), sys.argv[4]
    b2u = bytes_to_unicode()
    words = ["".join(b2u[b] for b in p.encode("utf-8")) for p in pieces(text)]
    corpus = [list(w) for w in words]
    merges = []
    for _ in range(merges_wanted):
        counts, order = {}, []
        for w in corpus:
            for pair in zip(w, w[1:]):
                if pair not in counts:
                    order.append(pair)
                counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        best = max(order, key=lambda p: counts[p])  # max keeps the first of equal counts
        merges.append(best)
        for i, w in enumerate(corpus):
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and (w[j], w[j + 1]) == best:
                    out.append(w[j] + w[j + 1])
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            corpus[i] = out
    vocab = {b2u[b]: b for b in range(256)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    ranks = {m: i for i, m in enumerate(merges)}
    ids = [vocab[s] for w in words for s in encode_word(w, ranks)]
    json.dump(vocab, open(folder + "/vocab.json", "w", encoding="utf-8"), ensure_ascii=False)
    with open(folder + "/merges.txt", "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(a + " " + b + "\n")
    json.dump(ids, open(folder + "/ids.json", "w"))


if __name__ == "__main__":
    main()

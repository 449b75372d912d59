"""The translation model with attention of examples/attention.mdl, trained to reverse
sequences of symbols, then decoded greedily on the trained `Translator`'s parameters, in
one call of `TranslatorGreedy` (its loop feeds each step the token the one before chose)
and, to the same tokens, from Python: `TranslatorEncode` once, then `TranslatorStep` one
token at a time; then by beam search from Python over the same step models. Reversal needs attention: output t is source position n-1-t, and the
attention weights of a trained model show it.

    python3 examples/train_translator.py              # a few seconds on 2 cores
    python3 examples/train_translator.py --steps 2000 --length 12
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from codegen import load

HERE = Path(__file__).resolve().parent  # its .mdl file lies beside it
START, END = 0, 1  # target tokens 0 and 1; symbols are 2 .. W-1, in source and target
W = 30             # the target vocabulary (the model's default); the source's V = 40 >= W


def reversal_batch(rng: np.random.Generator, batch: int, length: int) -> dict:
    """`batch` sequences of 3 to `length` symbols, padded to `length`, and their reversals
    behind START (target_in) and before END (target_out)."""
    lengths = rng.integers(3, length + 1, batch)
    source = np.zeros((length, batch), np.int32)
    target = np.zeros((length + 1, batch), np.int32)
    for b, n in enumerate(lengths):
        symbols = rng.integers(2, W, n)
        source[:n, b] = symbols
        target[:n, b] = symbols[::-1]
        target[n, b] = END
    return dict(source=source, source_lengths=lengths.astype(np.int32),
                target_in=np.concatenate([np.full((1, batch), START, np.int32), target[:-1]]),
                target_out=target, target_lengths=(lengths + 1).astype(np.int32))


def greedy(encoder, step, source: np.ndarray, lengths: np.ndarray, steps: int):
    """TranslatorGreedy's work from Python, a call a token: the tokens each step chooses,
    i32[steps, B] (END again once a row has chosen it), and its attention weights over
    the source, f32[steps, S, B]."""
    enc = encoder.forward(source=source, source_lengths=lengths)
    h, c = enc["h"], enc["c"]
    context = np.zeros_like(h)
    token = np.full(source.shape[1], START, np.int32)
    tokens, weights = [], []
    for _ in range(steps):
        out = step.forward(token=token, h=h, c=c, context=context, states=enc["states"],
                           keys=enc["keys"], real=enc["real"])
        token = np.where(token == END, END, out["logits"].argmax(axis=1)).astype(np.int32)
        h, c, context = out["h_out"], out["c_out"], out["context_out"]
        tokens.append(token)
        weights.append(out["weights"])
    return np.stack(tokens), np.stack(weights)


def beam_search(encoder, step, source: np.ndarray, lengths: np.ndarray, steps: int,
                width: int):
    """Beam search over TranslatorStep from Python: each source row's `width` best
    sequences so far are rows of one batch (the encoder's states repeated for them), each
    step extends every one by every token, and the `width` best of those, by the sum of
    their tokens' log-probabilities, go on; a sequence that has chosen END keeps it at no
    cost. The sequences, i32[B, width, steps], best first, and their scores, [B, width]."""
    batch = source.shape[1]
    enc = encoder.forward(source=source, source_lengths=lengths)
    memory = {k: np.repeat(enc[k], width, axis=1) for k in ("states", "keys", "real")}
    h, c = (np.repeat(enc[k], width, axis=0) for k in ("h", "c"))
    context = np.zeros_like(h)
    scores = np.full((batch, width), -np.inf)
    scores[:, 0] = 0.0  # one sequence to start from: the start token alone
    sequences = np.zeros((batch, width, 0), np.int32)
    token = np.full(batch * width, START, np.int32)
    for _ in range(steps):
        out = step.forward(token=token, h=h, c=c, context=context, **memory)
        logits = out["logits"].astype(np.float64)
        shifted = logits - logits.max(axis=1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        ended = token == END
        logp[ended] = -np.inf
        logp[ended, END] = 0.0
        total = (scores[:, :, None] + logp.reshape(batch, width, -1)).reshape(batch, -1)
        best = np.argsort(-total, axis=1, kind="stable")[:, :width]
        parent, token = best // logp.shape[1], (best % logp.shape[1]).astype(np.int32)
        scores = np.take_along_axis(total, best, axis=1)
        sequences = np.concatenate([np.take_along_axis(sequences, parent[:, :, None], axis=1),
                                    token[:, :, None]], axis=2)
        rows = (np.arange(batch)[:, None] * width + parent).ravel()
        h, c, context = out["h_out"][rows], out["c_out"][rows], out["context_out"][rows]
        token = token.ravel()
    return sequences, scores


def timed(run, repeat: int = 5):
    """run()'s result and its fastest time of `repeat` calls, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return result, best


def train(steps: int, length: int, batch: int = 32, seed: int = 0, log=print):
    """The trained Translator and the module it lives in, whose TranslatorGreedy decodes
    length + 1 tokens (L)."""
    module = load(HERE / "attention.mdl", defines={"L": length + 1})
    model = module.Translator(seed=seed)
    model.set_optimizer("adam", lr=1e-2, clip_norm=5.0)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    for i in range(steps):
        loss = float(model.train_step(**reversal_batch(rng, batch, length))["loss"])
        if i % 100 == 0 or i == steps - 1:
            log(f"step {i:5d}  loss {loss:.4f}  {time.perf_counter() - start:.1f} s")
    return module, model


def evaluate(module, model, length: int, batch: int = 256, seed: int = 1) -> dict:
    """Greedy decoding of new sequences in one call: the share reversed exactly (END
    included), and the share of steps t < n whose attention peaks at source position
    n-1-t; the time of that call and of decoding from Python a token at a time (the
    fastest of 5)."""
    data = reversal_batch(np.random.default_rng(seed), batch, length)
    decoder = module.TranslatorGreedy(params=model)
    out, one_call = timed(lambda: decoder.forward(source=data["source"],
                                                  source_lengths=data["source_lengths"]))
    tokens, weights = out["tokens"], out["weights"]
    encoder, step = module.TranslatorEncode(params=model), module.TranslatorStep(params=model)
    (stepped, _), from_python = timed(lambda: greedy(encoder, step, data["source"],
                                                     data["source_lengths"], length + 1))
    n = data["source_lengths"]
    exact = [np.array_equal(tokens[:k + 1, b], data["target_out"][:k + 1, b])
             for b, k in enumerate(n)]
    looked = [weights[t, :, b].argmax() == k - 1 - t for b, k in enumerate(n) for t in range(k)]
    return {"exact": float(np.mean(exact)), "attention": float(np.mean(looked)),
            "data": data, "tokens": tokens, "weights": weights, "stepped": stepped,
            "seconds": (one_call, from_python)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--length", type=int, default=8, help="longest source sequence")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    module, model = train(args.steps, args.length, seed=args.seed)
    result = evaluate(module, model, args.length)
    data, tokens, weights = result["data"], result["tokens"], result["weights"]
    for b in range(3):
        n = int(data["source_lengths"][b])
        said = tokens[:, b].tolist()
        said = said[:said.index(END) + 1] if END in said else said
        print(f"source {data['source'][:n, b].tolist()}  ->  {said}")
    n = int(data["source_lengths"][0])
    print("attention of the first sequence (rows: output steps, columns: source positions)")
    for t in range(n + 1):
        print("  " + " ".join(f"{w:4.2f}" for w in weights[t, :n, 0]))
    print(f"reversed exactly: {result['exact']:.1%} of {len(data['source_lengths'])} new "
          f"sequences; attention on the mirrored position: {result['attention']:.1%} of steps")
    one_call, from_python = result["seconds"]
    same = np.array_equal(result["tokens"], result["stepped"])
    print(f"decoded in one call of TranslatorGreedy in {one_call * 1e3:.2f} ms; from Python, "
          f"a call a token, in {from_python * 1e3:.2f} ms ({'the same' if same else 'OTHER'} "
          "tokens)")
    encoder, step = module.TranslatorEncode(params=model), module.TranslatorStep(params=model)
    source, lengths = data["source"], data["source_lengths"]
    (beams, _), from_python = timed(lambda: beam_search(encoder, step, source, lengths,
                                                        args.length + 1, width=4))
    searcher = module.TranslatorBeam(params=model)  # its K is 4, its L length + 1
    in_model, one_call = timed(lambda: searcher.forward(source=source, source_lengths=lengths))
    exact = [np.array_equal(beams[b, 0, :k + 1], data["target_out"][:k + 1, b])
             for b, k in enumerate(lengths)]
    same = np.array_equal(in_model["tokens"], beams)
    print(f"beam search of width 4: reversed exactly {np.mean(exact):.1%}; in one call of "
          f"TranslatorBeam in {one_call * 1e3:.2f} ms, from Python in "
          f"{from_python * 1e3:.2f} ms ({'the same' if same else 'OTHER'} sequences)")


if __name__ == "__main__":
    main()

"""geomjax in one page: MiniLM's hidden states -> Song & Zhong's decomposition -> metrics -> figure -> a claim.

Run: ``python docs/tutorial.py [figure.png]`` (offline; about 20 s on a laptop CPU).
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import geomjax as gj

model = gj.load("minilm")  # module, parameters and its own WordPiece tokenizer
print(model, model.to_str_tokens("Hidden states have geometry."), sep="\n")
# C = 32 contexts of T = 24 tokens of English prose (Python's help topics, shipped with Python)
ids = np.concatenate([model.to_tokens(text, special_tokens=False)[0] for _, text in gj.data.pydoc_topics()[:40]])
C, T = 32, 24
logits, cache = model.run_with_cache(ids[: C * T].reshape(C, T), names="blocks.*.hook_resid_post")
layers = np.asarray(cache.stack("hook_resid_post"))  # (L, C, T, d): every block's output
decs = [gj.decompose(h) for h in layers]  # eqs. (2)-(3): h = mean + pos_t + ctx_c + resid
ratio = [float(np.linalg.norm(d.pos) / np.linalg.norm(d.ctx)) for d in decs]
rank = int(gj.spectral.screenot_rank(np.asarray(decs[-1].pos), k=8))
incoh = float(gj.geometry.incoherence(decs[-1].pos, decs[-1].ctx))
print(f"last layer: ScreeNOT rank of pos = {rank}, incoherence(pos, ctx) = {incoh:.3f}")
fig, ax = plt.subplots(1, 2, figsize=(8, 3), layout="constrained")
ax[0].plot(range(1, len(ratio) + 1), ratio, "o-")
ax[0].set(xlabel="layer", ylabel="‖pos‖ / ‖ctx‖")
p = np.asarray(decs[-1].pos)
ax[1].imshow(p @ p.T / np.outer(*[np.linalg.norm(p, axis=1)] * 2), cmap="RdBu_r", vmin=-1, vmax=1)
ax[1].set(title="cos(pos_t, pos_t') (last layer)")
fig.savefig(sys.argv[1] if len(sys.argv) > 1 else "tutorial.png")
# The baseline the incoherence is read against: E cos²(u, v) = 1/d for random directions (a checked claim)
(result,) = gj.claims.run(select="song_zhong.incoherence_baseline.cos2")
print(result.id, "->", result.verdict, f"(estimate {result.estimate:.4f}, predicted {result.predicted:.4f})")

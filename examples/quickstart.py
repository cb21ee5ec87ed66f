"""Write an op in .tdsl, check it, and evaluate its meaning with numpy.

    python examples/quickstart.py
"""
import numpy as np

import tdsl

SOURCE = """
# y = relu(x . w^T + b), the shape of a fully-connected layer
op dense_relu(X: f32[N, K], W: f32[M, K], b: f32[M]) -> Y: f32[N, M] {
    Y[n, m] = max(sum[k](X[n, k] * W[m, k]) + b[m], 0.0)
}
"""

module = tdsl.loads(SOURCE, "quickstart.tdsl")
op = module["dense_relu"]
print(op.signature())

rng = np.random.default_rng(0)
x = rng.standard_normal((4, 8), dtype=np.float32)
w = rng.standard_normal((3, 8), dtype=np.float32)
b = rng.standard_normal(3, dtype=np.float32)
y = op.reference(x, w, b)
assert np.allclose(y, np.maximum(x @ w.T + b, 0), atol=1e-5)
print("reference matches numpy:", y.shape, y.dtype)

# A mistake is a TdslError with file:line:col and a caret, never a traceback.
try:
    tdsl.loads("op bad(X: f32[N]) -> Y: f32[N] {\n    Y[i] = X[i + 1]\n}", "bad.tdsl")
except tdsl.TdslError as e:
    print(e)

# Compile it to C (gcc, cached), call it on numpy arrays, read its loop nest.
kernel = op.build(target="c")
assert np.allclose(kernel(x, w, b), y, atol=1e-5)
print("compiled C matches the reference")
print(op.lower(shapes={"N": 4, "K": 8, "M": 3}))

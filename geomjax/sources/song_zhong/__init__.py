"""The claims of Song & Zhong (2023): synthetic Grams and Theorem 1 (:mod:`.claims`), Theorem 2's kernel
factorization (:mod:`.theorem2`), MiniLM's own hidden states (:mod:`.real`). ``geomjax demo --claims`` checks them."""

TITLE = "Song & Zhong (2023), \"Uncovering hidden geometry in Transformers via disentangling position and context\""
SHORT = "Song & Zhong"
DEMO = True  # the source `geomjax demo --claims` checks (its claims do not depend on the model studied)

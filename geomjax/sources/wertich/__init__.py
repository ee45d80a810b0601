"""Claims from Wertich (2024), "Gaussian statistics of attention" (thesis; issue 6), one module per chapter.

Every quantitative statement of chapters 4-7 listed in issue 6 is registered as one claim (ids
``wertich.<section>.<name>``) when its module is imported, one module per chapter:

* :mod:`geomjax.sources.wertich.ch4`: joint Gaussians under linear maps, 2×2 block eigenvalues;
* :mod:`geomjax.sources.wertich.ch5`: log-normal moments, softmax limits, SLERP and the cosine
  conjecture, softmax ratios, the Taylor "linearity" of exp;
* :mod:`geomjax.sources.wertich.ch6`: bilinear forms, singular values and the §2.5 Marchenko–Pastur
  density, traces of random matrix products, spheres, eq. (6.49), normality of xᵀCy;
* :mod:`geomjax.sources.wertich.ch7`: attention outputs with fixed weights, random attention stacks;
* :mod:`geomjax.sources.wertich._shared`: the claim constructors they share.

Each is checked by Monte Carlo (``geomjax.theory.montecarlo`` via the claims registry) against its closed
form in :mod:`geomjax.theory.gaussian`, or deterministically (Tolerance / Inequality). A statement that is
wrong as printed is registered twice: ``*.printed`` (verdict "does not hold", with the numbers) and
``*.corrected`` (the corrected form, which holds). Conventions the thesis leaves implicit are stated in
each claim (see also the module docstring of :mod:`geomjax.theory.gaussian`).

:func:`geomjax.sources.wertich.report.report_sections` adds the figures of
``geomjax verify --source wertich``: Fig. 5.1 (averaged SLERP KL curve, fitted a·cos(πt/2 + b) + c and
residuals, residual versus n and l), the Marchenko–Pastur histogram against the printed and the
corrected density, softmax entropy versus the scale α, and token diversity / attention entropy versus
depth in random attention stacks.
"""

TITLE = "Wertich (2024), \"Gaussian statistics of attention\" (thesis)"
SHORT = "Wertich"


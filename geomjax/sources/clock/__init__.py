"""The claims of the clock blog and Nanda et al. on modular addition (:mod:`.claims`) and the figures of their
report (:mod:`.report`)."""

TITLE = "The clock blog (modular addition) and Nanda et al., \"Progress measures for grokking\""
SHORT = "the clock blog"

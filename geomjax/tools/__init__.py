"""Layer 4, tools: reading models for analyses — the forward fused with the streaming accumulator
(extraction), the attention-side probes (attention_probe) and the clock model's analysis (clock_probe).
convert/ and train/ are the other packages of this layer.
"""

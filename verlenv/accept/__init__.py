"""`verlenv accept`: a small PPO loop and a memory-stability gate that an image must pass.

Everything here imports torch lazily: the core install of verlenv must not need it.
"""

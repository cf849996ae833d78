"""verlenv: reproducible container and environment builder for RL training with verl."""

__version__ = "0.1.0"

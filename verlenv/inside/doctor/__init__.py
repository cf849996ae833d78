"""`verlenv doctor`: what is wrong with this environment, and how to fix it."""

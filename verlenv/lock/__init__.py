"""Profile -> lockfiles/NAME.lock: resolve with uv, read and check locks offline."""

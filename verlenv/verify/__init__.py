"""Wheels -> lockfiles/NAME.verify.json: metadata and ELF ABI verdicts."""
